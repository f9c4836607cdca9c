// SharedSegment: a block of memory two processes on one host map together,
// backed by a memfd and handed over as a file descriptor (see fd_passing.h).
//
// Why a memfd rather than a named /dev/shm file: a memfd has no name in any
// filesystem, so nothing is left behind in /dev/shm when a process dies; its
// pages are freed when the last descriptor and the last mapping of it go.
//
// Create() makes the memfd (MFD_CLOEXEC | MFD_ALLOW_SEALING), sizes it and
// seals it with F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL, so that no holder
// of the descriptor can change its size under another's mapping (shrinking it
// would make the other's accesses past the new end raise SIGBUS). Adopt()
// maps a received descriptor only if those seals are present.
//
//   auto segment = SharedSegment::Create("tensor", bytes);   // in one process
//   SendWithFds(sock, "seg", {segment->fd()});
//   ...
//   auto peer = SharedSegment::Adopt(received.fds[0].release(),  // the other
//                                    SharedSegment::Access::kReadOnly);
//
// Contents start zeroed. Memory is committed page by page as it is touched
// (or all at once by Populate), and charged to the memory cgroup of the
// process that touches it first.
// A segment owns its descriptor and its mapping: move-only; the destructor
// unmaps and closes. Errors name what failed, the size and the errno text.
#ifndef REDUCER_CORE_SHM_SHARED_SEGMENT_H_
#define REDUCER_CORE_SHM_SHARED_SEGMENT_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/shm/memory_room.h"
#include "core/shm/unique_fd.h"

namespace reducer {

class SharedSegment {
 public:
  enum class Access {
    kReadWrite,
    kReadOnly,  // mapped PROT_READ: a write through data() faults (SIGSEGV)
  };

  // Who may write the segment.
  enum class Writers {
    kAnyHolder,    // whoever holds the descriptor may map it read-write
    // The creator's own mapping alone: the memfd is sealed with
    // F_SEAL_FUTURE_WRITE once mapped, so no holder of the descriptor
    // (nor a reopening of it through /proc) can map it writable or write()
    // it again (EPERM).
    kCreatorOnly,
  };

  // A new zeroed segment of `bytes` (> 0) bytes, mapped read-write. `name`
  // only labels it in /proc/<pid>/fd and /proc/<pid>/maps ("/memfd:<name>").
  // Refused with CheckRoom's answer when `bytes` does not fit.
  static absl::StatusOr<SharedSegment> Create(
      absl::string_view name, size_t bytes,
      Writers writers = Writers::kAnyHolder);

  // Maps the memfd `fd`, whose ownership passes to the call (closed on
  // error). Refused unless `fd` is a memfd carrying F_SEAL_GROW,
  // F_SEAL_SHRINK and F_SEAL_SEAL and of a nonzero size (taken from fstat).
  static absl::StatusOr<SharedSegment> Adopt(int fd, Access access);

  // Whether `bytes` more of shared memory fit: CheckMemoryRoom (memory_room.h).
  static absl::Status CheckRoom(size_t bytes,
                                const MemorySources& sources = MemorySources());

  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  // Commits every page and maps it into this process now, as touching each
  // would (MADV_POPULATE_WRITE; _READ for a read-only mapping); the contents
  // are unchanged. For a small segment soon touched all over, such as a
  // ring whose records walk through it, which would otherwise fault once
  // per page on each side's first pass. The errno's status, naming the
  // advice and the segment, when the kernel refuses (before Linux 5.14 it
  // does not know the advice); the segment stays usable either way.
  absl::Status Populate();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // The memfd, still owned by the segment (dup it to keep it longer).
  int fd() const { return fd_.get(); }
  Access access() const { return access_; }

 private:
  SharedSegment(UniqueFd fd, void* data, size_t size, Access access)
      : fd_(std::move(fd)), data_(data), size_(size), access_(access) {}
  void Unmap();

  UniqueFd fd_;
  void* data_ = nullptr;
  size_t size_ = 0;
  Access access_ = Access::kReadWrite;
};

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_SHARED_SEGMENT_H_

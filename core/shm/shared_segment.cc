#include "core/shm/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

constexpr int kRequiredSeals = F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL;

absl::Status Errno(int error, absl::string_view what) {
  return absl::ErrnoToStatus(error, what);
}

std::string SealNames(int seals) {
  std::string names;
  auto add = [&](int seal, absl::string_view name) {
    if ((seals & seal) == 0) return;
    absl::StrAppend(&names, names.empty() ? "" : " | ", name);
  };
  add(F_SEAL_SEAL, "F_SEAL_SEAL");
  add(F_SEAL_SHRINK, "F_SEAL_SHRINK");
  add(F_SEAL_GROW, "F_SEAL_GROW");
  add(F_SEAL_WRITE, "F_SEAL_WRITE");
  add(F_SEAL_FUTURE_WRITE, "F_SEAL_FUTURE_WRITE");
  return names.empty() ? "none" : names;
}

absl::StatusOr<void*> Map(int fd, size_t bytes, SharedSegment::Access access,
                          absl::string_view what) {
  int prot = access == SharedSegment::Access::kReadOnly
                 ? PROT_READ
                 : PROT_READ | PROT_WRITE;
  void* data = mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return Errno(errno, absl::StrCat("mmap of ", what, " (", bytes,
                                     " bytes, fd ", fd, ")"));
  }
  return data;
}

}  // namespace

absl::StatusOr<SharedSegment> SharedSegment::Create(absl::string_view name,
                                                    size_t bytes,
                                                    Writers writers) {
  std::string label(name);
  std::string what = absl::StrCat("shared segment \"", label, "\"");
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " of 0 bytes"));
  }
  REDUCER_RETURN_IF_ERROR(CheckRoom(bytes));
  UniqueFd fd(memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    return Errno(errno, absl::StrCat("memfd_create for ", what, " of ", bytes,
                                     " bytes"));
  }
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return Errno(errno,
                 absl::StrCat("ftruncate of ", what, " to ", bytes, " bytes"));
  }
  // Mapped before the seals: F_SEAL_FUTURE_WRITE spares mappings that
  // exist already, and this one is the creator's.
  REDUCER_ASSIGN_OR_RETURN(void* data,
                           Map(fd.get(), bytes, Access::kReadWrite, what));
  SharedSegment segment(std::move(fd), data, bytes, Access::kReadWrite);
  const int seals = writers == Writers::kCreatorOnly
                        ? kRequiredSeals | F_SEAL_FUTURE_WRITE
                        : kRequiredSeals;
  if (fcntl(segment.fd(), F_ADD_SEALS, seals) != 0) {
    return Errno(errno, absl::StrCat("F_ADD_SEALS ", SealNames(seals), " on ",
                                     what, " of ", bytes, " bytes"));
  }
  return segment;
}

absl::StatusOr<SharedSegment> SharedSegment::Adopt(int raw_fd, Access access) {
  UniqueFd fd(raw_fd);
  std::string what = absl::StrCat("adopted fd ", raw_fd);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return Errno(errno, absl::StrCat("fstat of ", what));
  }
  int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) {
    return Errno(errno, absl::StrCat(what, " (", st.st_size,
                                     " bytes) is not a sealable memfd: "
                                     "F_GET_SEALS"));
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " (", st.st_size, " bytes) is not sealed against resizing: has ",
        SealNames(seals), ", needs ", SealNames(kRequiredSeals)));
  }
  if (st.st_size <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is empty (", st.st_size, " bytes)"));
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  REDUCER_ASSIGN_OR_RETURN(void* data, Map(fd.get(), bytes, access, what));
  return SharedSegment(std::move(fd), data, bytes, access);
}

absl::Status SharedSegment::CheckRoom(size_t bytes,
                                      const MemorySources& sources) {
  return CheckMemoryRoom(bytes, sources);
}

absl::Status SharedSegment::Populate() {
  const bool read_only = access_ == Access::kReadOnly;
  if (madvise(data_, size_, read_only ? MADV_POPULATE_READ
                                      : MADV_POPULATE_WRITE) != 0) {
    return Errno(errno, absl::StrCat("madvise(", read_only
                                                     ? "MADV_POPULATE_READ"
                                                     : "MADV_POPULATE_WRITE",
                                     ") of a shared segment of ", size_,
                                     " bytes (fd ", fd_.get(), ")"));
  }
  return absl::OkStatus();
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      access_(other.access_) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    Unmap();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    access_ = other.access_;
  }
  return *this;
}

SharedSegment::~SharedSegment() { Unmap(); }

void SharedSegment::Unmap() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace reducer

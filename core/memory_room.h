// CheckMemoryRoom: whether `bytes` more of shared memory (memfd pages, which
// are shmem) fit in this process's memory, asked before any of it is
// committed.
//
// Two limits are consulted, each only where its files exist:
//   - the cgroup v2 memory limit: memory.max minus memory.current (shmem pages
//     are charged to the cgroup that first touches them; "max" means none).
//     memory.current counts page cache the kernel could reclaim, so this
//     errs towards refusing;
//   - MemAvailable in /proc/meminfo (the kernel's estimate, in kB, of what can
//     be allocated without swapping).
// Missing files are skipped (outside a cgroup v2 mount only meminfo is
// consulted; with neither, everything fits). The answer is OK when `bytes`
// fits under every limit found; RESOURCE_EXHAUSTED naming the file and both
// numbers when it does not; INTERNAL naming the file when one exists but
// cannot be read or parsed.
//
// The answer is a snapshot: other processes may take the room afterwards.
#ifndef REDUCER_CORE_MEMORY_ROOM_H_
#define REDUCER_CORE_MEMORY_ROOM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace reducer {

// The files CheckMemoryRoom reads. The defaults are the cgroup v2 files at the
// root of /sys/fs/cgroup, which are the process's own cgroup when it runs in
// a cgroup namespace (as in a container), and /proc/meminfo.
struct MemorySources {
  std::string cgroup_max = "/sys/fs/cgroup/memory.max";
  std::string cgroup_current = "/sys/fs/cgroup/memory.current";
  std::string meminfo = "/proc/meminfo";
};

absl::Status CheckMemoryRoom(size_t bytes,
                             const MemorySources& sources = MemorySources());

}  // namespace reducer

#endif  // REDUCER_CORE_MEMORY_ROOM_H_

// CheckMemoryRoom: whether `bytes` more of shared memory (memfd pages, which
// are shmem) fit in this process's memory, asked before any of it is
// committed.
//
// Two kinds of limit are consulted, each only where its files exist:
//   - cgroup v2 memory limits: memory.max minus memory.current of the
//     process's own cgroup (the "0::" line of /proc/self/cgroup) and of each
//     of its ancestors up to the root of the mount (shmem pages are charged
//     to the cgroup that first touches them; "max" means no limit). In a
//     cgroup namespace, as in a container, the own cgroup is the root.
//     memory.current counts page cache the kernel could reclaim, so this
//     errs towards refusing;
//   - MemAvailable in /proc/meminfo (the kernel's estimate, in kB, of what can
//     be allocated without swapping).
// Missing files are skipped (without a cgroup v2 mount only meminfo is
// consulted; with neither, everything fits). The answer is OK when `bytes`
// fits under every limit found; RESOURCE_EXHAUSTED naming the files and both
// numbers of the first limit it does not fit; INTERNAL naming the file when
// one exists but cannot be read or parsed.
//
// The answer is a snapshot: other processes may take the room afterwards.
#ifndef REDUCER_CORE_SHM_MEMORY_ROOM_H_
#define REDUCER_CORE_SHM_MEMORY_ROOM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace reducer {

// Where CheckMemoryRoom reads: the cgroup v2 mount, the file naming the
// process's cgroup below it, and meminfo.
struct MemorySources {
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string meminfo = "/proc/meminfo";
};

absl::Status CheckMemoryRoom(size_t bytes,
                             const MemorySources& sources = MemorySources());

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_MEMORY_ROOM_H_

// FailedCollectives: a job's collectives that failed before any rank of
// their group attached (a rank's malformed call failed the collective its
// header names), remembered so that each rank calling one later gets its
// error at once rather than waiting for its deadline. An entry is no
// Collective and holds no payload state: its matching key, its error, the
// ranks yet to be told, and the memory reservations its owner made for it
// (EntryBytes); it is forgotten once every one of those ranks was told.
//
// Bounded by its owner, the Job: entries count among the job's and its
// tenant's pending collectives, the owner forgets the oldest (ForgetOldest)
// to make room for a new entry or for a new collective that ranks wait for
// (never refusing one for them), and their bytes are in the memory budget
// and the job's and tenant's shares.
// A rank that calls a collective whose entry was forgotten waits for its
// peers as if nothing had failed, until its deadline.
//
// Not thread-safe: the Job calls it under its own lock.
#ifndef REDUCER_SERVER_JOBS_FAILED_COLLECTIVES_H_
#define REDUCER_SERVER_JOBS_FAILED_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "server/engine/memory_budget.h"

namespace reducer {

class FailedCollectives {
 public:
  // What an entry under `key` failed with `status`, for a group of
  // `group_size` ranks, holds: its owner reserves this before Add.
  static size_t EntryBytes(const std::string& key, const absl::Status& status,
                           size_t group_size);

  // Remembers that the collective under `key` failed with `status`, for
  // each of `to_tell` (not empty) when it calls it; `held` (the entry's
  // EntryBytes in each budget) is released when the entry is forgotten.
  // An entry under the same key is replaced.
  void Add(std::string key, absl::Status status, std::vector<int> to_tell,
           std::vector<MemoryReservation> held);

  // The error for `rank` of the failed collective under `key`, once: the
  // rank is told, and the entry forgotten when it was the last to be.
  // nullopt when no entry has `rank` still to tell.
  std::optional<absl::Status> Take(const std::string& key, int rank);

  // Forgets the oldest entry; false when there is none.
  bool ForgetOldest();
  // Forgets every entry (a new epoch).
  void Clear();

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    absl::Status status;
    std::vector<int> to_tell;  // sorted
    std::vector<MemoryReservation> held;
    uint64_t age = 0;  // its key in by_age_
  };

  absl::flat_hash_map<std::string, Entry> entries_;
  std::map<uint64_t, std::string> by_age_;  // age -> key, oldest first
  uint64_t next_age_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_FAILED_COLLECTIVES_H_

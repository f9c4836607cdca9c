// AttemptCache: the collective each recent contribution joined, by its
// attempt id, so that a retried contribution (a client whose stream was lost
// resends it with the same id) goes back to the collective it joined and is
// never counted twice. Bounded: past `capacity` ids the oldest is forgotten
// first, so memory stays flat however long a job runs.
//
//   AttemptCache cache(4096);
//   cache.Remember("session-7/12", collective);
//   std::optional<std::weak_ptr<Collective>> first = cache.Find("session-7/12");
//
// Thread-compatible: the owning Job guards it with its lock.
#ifndef REDUCER_SERVER_JOBS_ATTEMPT_CACHE_H_
#define REDUCER_SERVER_JOBS_ATTEMPT_CACHE_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace reducer {

class Collective;

class AttemptCache {
 public:
  explicit AttemptCache(size_t capacity) : capacity_(capacity) {}

  // The collective `attempt_id` joined, if it is still remembered (the
  // pointer may have expired: that collective is gone).
  std::optional<std::weak_ptr<Collective>> Find(
      const std::string& attempt_id) const;

  // Records that `attempt_id` joined `collective`, forgetting the oldest
  // id beyond capacity. An id seen before is moved to `collective`.
  void Remember(const std::string& attempt_id,
                std::weak_ptr<Collective> collective);

  // Forgets everything (a new epoch: no attempt of the old one is valid).
  void Clear();

  size_t size() const { return by_id_.size(); }

 private:
  const size_t capacity_;
  absl::flat_hash_map<std::string, std::weak_ptr<Collective>> by_id_;
  std::deque<std::string> oldest_first_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_ATTEMPT_CACHE_H_

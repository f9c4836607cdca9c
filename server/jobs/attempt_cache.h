// AttemptCache: the collective each recent contribution joined, by its
// attempt id, so that a retried contribution (a client whose stream was lost
// resends it with the same id) goes back to the collective it joined and is
// never counted twice. Bounded twice: past `capacity` ids the oldest is
// forgotten first, so a job's cache never holds more, however many
// distinct ids its clients send; and each id holds its EntryBytes in the
// memory budget (a reservation its caller makes and hands over), given
// back when it is forgotten, so that what the cache holds is counted.
//
//   AttemptCache cache(4096);
//   cache.Remember("session-7/12", collective, std::move(reservations));
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
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/engine/memory_budget.h"

namespace reducer {

class Collective;

class AttemptCache {
 public:
  explicit AttemptCache(size_t capacity) : capacity_(capacity) {}

  // What remembering `attempt_id` holds: the id twice (the map's key and
  // the age order), and its entry.
  static size_t EntryBytes(const std::string& attempt_id);

  // The collective `attempt_id` joined, if it is still remembered (the
  // pointer may have expired: that collective is gone).
  std::optional<std::weak_ptr<Collective>> Find(
      const std::string& attempt_id) const;

  // Records that `attempt_id` joined `collective`, holding `held` (the
  // id's EntryBytes of the budget) until the id is forgotten, and
  // forgetting the oldest id beyond capacity. An id seen before is moved
  // to `collective`, and keeps what it held (`held` is given back).
  void Remember(const std::string& attempt_id,
                std::weak_ptr<Collective> collective,
                std::vector<MemoryReservation> held = {});

  // Forgets everything (a new epoch: no attempt of the old one is valid).
  void Clear();

  // Its job was freed and answers only replays now, which need an id only
  // while its collective lives: forgets the ids of collectives gone, and
  // gives back every id's reservation.
  void KeepForReplays();

  size_t size() const { return by_id_.size(); }

 private:
  struct Entry {
    std::weak_ptr<Collective> collective;
    std::vector<MemoryReservation> held;
  };
  const size_t capacity_;
  absl::flat_hash_map<std::string, Entry> by_id_;
  std::deque<std::string> oldest_first_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_ATTEMPT_CACHE_H_

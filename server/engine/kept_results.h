// KeptResults: one job's results that were sent but whose receipt no client
// has acknowledged yet, so that a rank whose connection (or session) broke
// while its result was on the way can ask for it again and get it, instead
// of failing while the other ranks of its collective succeeded.
//
// A result is kept by its attempt id (`<session id>/<n>`, as clients make
// them; CollectiveHeader.attempt_id) and its rank, with the tensors that
// attempt declared (a replay must declare the same) and the messages the
// Collective sent (they share the result's storage; nothing is copied).
// It is forgotten at the first of:
//   - an acknowledgement: a later call of the same session says every
//     attempt numbered below some n has its outcome (received_below);
//   - `keep_for` after it was kept (a client asks again only within its
//     call's retry window, which is shorter);
//   - Clear() (the job is freed).
// Room: every kept result holds its size, plus `entry_bytes` for its entry
// (so that results of no bytes, barriers', are bounded too), in `budget`, a server-wide
// MemoryBudget of its own (--kept_results_bytes) apart from the budget of
// collectives in flight, so keeping results never makes a collective fail.
// A result larger than an eighth of that budget is never kept, and one that
// finds no room is not kept: its loss in delivery then fails that rank's
// call, as it always did.
//
//   KeptResults kept(&budget, absl::Seconds(15));
//   if (kept.Reserve(n)) {
//     ... kept.Keep("s1/7", rank, declared, messages, n);
//   }
//   std::optional<KeptResults::Kept> again = kept.Find("s1/7", rank);
//   kept.Acknowledge("s1", 8);  // s1/0 .. s1/7 arrived: forget them
//
// Thread-safe; it calls nothing outside itself while holding its lock, so
// any lock may be held when calling it.
#ifndef REDUCER_SERVER_ENGINE_KEPT_RESULTS_H_
#define REDUCER_SERVER_ENGINE_KEPT_RESULTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/fingerprint.h"
#include "server/engine/clock.h"
#include "server/engine/memory_budget.h"
#include "server/engine/rank_channel.h"

namespace reducer {

class KeptResults {
 public:
  struct Kept {
    std::vector<TensorSpec> declared;  // the tensors the attempt declared
    std::vector<ResultMessage> messages;
  };

  // What a kept result's entry costs besides its bytes: the attempt id and
  // the specs, the tables' nodes.
  static constexpr size_t kEntryBytes = 256;

  // `budget` outlives this and is shared by every job's KeptResults. Each
  // result kept holds `entry_bytes` of it besides its own bytes. `keep_for`
  // is measured on `clock`, which outlives this.
  KeptResults(MemoryBudget* budget, absl::Duration keep_for,
              size_t entry_bytes = kEntryBytes,
              const Clock* clock = &Clock::Steady())
      : budget_(budget),
        keep_for_(keep_for),
        entry_bytes_(entry_bytes),
        clock_(clock) {}
  ~KeptResults() { Clear(); }
  KeptResults(const KeptResults&) = delete;
  KeptResults& operator=(const KeptResults&) = delete;

  // Takes room for a result of `bytes` (and its entry) about to be collected for keeping,
  // forgetting this job's oldest kept results while there is none (a
  // newer result is the likelier to be asked for). False when it is too
  // large to keep or there is no room even so: then it is not kept.
  bool Reserve(size_t bytes);
  // Gives back a reservation whose result will not be kept after all (its
  // collective failed).
  void Unreserve(size_t bytes);

  // Keeps `messages`, the whole result `rank` got for `attempt_id` (which
  // declared the tensors `declared`), whose `bytes` were reserved; from now
  // on that reservation is this entry's. An attempt id kept before is
  // replaced.
  void Keep(const std::string& attempt_id, int rank,
            std::vector<TensorSpec> declared,
            std::vector<ResultMessage> messages, size_t bytes);

  // What is kept for `attempt_id` if `rank` got it; nullopt if nothing is
  // (never, no longer, or for another rank).
  std::optional<Kept> Find(const std::string& attempt_id, int rank);

  // Forgets the results of `session_id`'s attempts numbered below `below`
  // and of those numbered in `received`.
  void Acknowledge(const std::string& session_id, uint64_t below,
                   absl::Span<const uint64_t> received = {});

  // Forgets everything and gives back its room.
  void Clear();

  // Results kept now, and the bytes they hold (their entries' included).
  size_t size();
  size_t bytes();

 private:
  struct Entry {
    int rank = 0;
    std::string session_id;  // the attempt id up to its last '/'
    uint64_t number = 0;     // after it (0 if it is not a number)
    Kept kept;
    size_t bytes = 0;
    absl::Time kept_at;
  };

  void ForgetLocked(const std::string& attempt_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the front of oldest_first_, forgetting its entry unless that was
  // replaced since (a replaced entry is younger).
  void PopOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets entries kept more than keep_for_ ago.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MemoryBudget* const budget_;
  const absl::Duration keep_for_;
  const size_t entry_bytes_;
  const Clock* const clock_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> by_attempt_ ABSL_GUARDED_BY(mu_);
  // The same entries by session, then by attempt number, so that an
  // acknowledgement touches only what it forgets.
  // (An id without a number counts as number 0, so numbers may repeat.)
  absl::flat_hash_map<std::string, std::multimap<uint64_t, std::string>>
      by_session_ ABSL_GUARDED_BY(mu_);
  // Attempt ids in the order they were kept (some may be forgotten
  // already), for expiry.
  std::deque<std::pair<absl::Time, std::string>> oldest_first_
      ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_KEPT_RESULTS_H_

// LogGate: rate-limits the log lines a client can cause at will, so that a
// hostile or broken tenant cannot flood reducerd's log (and the disk behind
// it). For each (tenant, kind) pair, at most one line per `interval` (one
// second unless said) is let through; the lines held back are counted, and
// the count is said by the next line let through for that pair ("... (N
// more like this suppressed in the last 1.3s)"), or, when no such line
// comes within the interval, by a summary line for the pair that a later
// Admit hands back (Verdict::quiet). Every suppressed line is thus counted
// in exactly one line, and no pair gets more than one line per interval.
//
//   LogGate gate;  // absl::Now, one second
//   LogGate::Verdict v = gate.Admit("tenant-a", "collective_failed");
//   for (const LogGate::Quiet& q : v.quiet) print a summary of q;
//   if (v.pass) print the line, with SuppressedNote(v) appended;
//
// Memory: one entry per pair that printed within the last interval or has
// a count to report; entries are swept at most once per interval, so a
// stream of new tenants costs no more than the pairs seen in about two
// intervals.
//
// Thread-safe (one mutex, a leaf: the gate calls nothing while holding it).
#ifndef REDUCER_SERVER_LOG_GATE_H_
#define REDUCER_SERVER_LOG_GATE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace reducer {

class LogGate {
 public:
  // What time it is now; a test passes a fake clock.
  using Clock = std::function<absl::Time()>;

  // A pair whose interval ended with lines suppressed and no line since
  // to say so: its summary is due.
  struct Quiet {
    std::string tenant;
    std::string kind;
    int64_t suppressed = 0;
    absl::Duration over;  // since the pair's last line
  };

  // What to print for one line.
  struct Verdict {
    bool pass = false;         // print the line
    int64_t suppressed = 0;    // pass: lines of its pair held back before it
    absl::Duration over;       // pass: since its pair's last line
    std::vector<Quiet> quiet;  // summaries due now, of other pairs
  };

  explicit LogGate(Clock clock = &absl::Now,
                   absl::Duration interval = absl::Seconds(1));
  LogGate(const LogGate&) = delete;
  LogGate& operator=(const LogGate&) = delete;

  // A line of `kind` about `tenant` is to be printed now: whether it may
  // be, and the summaries due.
  Verdict Admit(absl::string_view tenant, absl::string_view kind)
      ABSL_LOCKS_EXCLUDED(mu_);

  // " (N more like this suppressed in the last X.Ys)", or "" when
  // `suppressed` is 0: what a line let through ends with.
  static std::string SuppressedNote(int64_t suppressed, absl::Duration over);

  // The pairs it holds an entry for now (a test's view of its memory).
  size_t entries() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    absl::Time last_line;    // when the pair last printed
    int64_t suppressed = 0;  // held back since
  };
  using Key = std::pair<std::string, std::string>;  // tenant, kind

  // Forgets the pairs whose interval ended with nothing held back, and
  // hands back (and restarts) those whose interval ended with lines held
  // back, except `current`.
  void SweepLocked(absl::Time now, const Key& current,
                   std::vector<Quiet>* quiet)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock clock_;
  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace reducer

#endif  // REDUCER_SERVER_LOG_GATE_H_

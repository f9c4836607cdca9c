#include "server/log_gate.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace reducer {

LogGate::LogGate(Clock clock, absl::Duration interval)
    : clock_(std::move(clock)), interval_(interval) {}

LogGate::Verdict LogGate::Admit(absl::string_view tenant,
                                absl::string_view kind) {
  const absl::Time now = clock_();
  Key key{std::string(tenant), std::string(kind)};
  Verdict verdict;
  absl::MutexLock lock(&mu_);
  if (now >= next_sweep_) {
    SweepLocked(now, key, &verdict.quiet);
    next_sweep_ = now + interval_;
  }
  auto [it, added] = entries_.try_emplace(std::move(key), Entry{now, 0});
  Entry& entry = it->second;
  if (added) {
    verdict.pass = true;
    return verdict;
  }
  if (now - entry.last_line < interval_) {
    ++entry.suppressed;
    return verdict;
  }
  verdict.pass = true;
  verdict.suppressed = entry.suppressed;
  verdict.over = now - entry.last_line;
  entry = Entry{now, 0};
  return verdict;
}

void LogGate::SweepLocked(absl::Time now, const Key& current,
                          std::vector<Quiet>* quiet) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto here = it++;
    Entry& entry = here->second;
    if (now - entry.last_line < interval_ || here->first == current) continue;
    if (entry.suppressed == 0) {
      entries_.erase(here);
      continue;
    }
    quiet->push_back(Quiet{here->first.first, here->first.second,
                           entry.suppressed, now - entry.last_line});
    // The summary is the pair's line for this interval.
    entry = Entry{now, 0};
  }
}

std::string LogGate::SuppressedNote(int64_t suppressed, absl::Duration over) {
  if (suppressed == 0) return "";
  return absl::StrFormat(" (%d more like this suppressed in the last %.1fs)",
                         suppressed, absl::ToDoubleSeconds(over));
}

size_t LogGate::entries() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace reducer

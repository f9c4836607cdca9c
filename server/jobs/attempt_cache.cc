#include "server/jobs/attempt_cache.h"

#include <utility>

namespace reducer {

size_t AttemptCache::EntryBytes(const std::string& attempt_id) {
  return 2 * (sizeof(std::string) + attempt_id.size()) + sizeof(Entry) +
         2 * sizeof(MemoryReservation);
}

std::optional<std::weak_ptr<Collective>> AttemptCache::Find(
    const std::string& attempt_id) const {
  auto it = by_id_.find(attempt_id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second.collective;
}

void AttemptCache::Remember(const std::string& attempt_id,
                            std::weak_ptr<Collective> collective,
                            std::vector<MemoryReservation> held) {
  auto [it, inserted] = by_id_.try_emplace(attempt_id);
  it->second.collective = std::move(collective);
  if (!inserted) return;
  it->second.held = std::move(held);
  oldest_first_.push_back(attempt_id);
  if (oldest_first_.size() > capacity_) {
    by_id_.erase(oldest_first_.front());
    oldest_first_.pop_front();
  }
}

void AttemptCache::KeepForReplays() {
  std::deque<std::string> kept;
  for (std::string& id : oldest_first_) {
    auto it = by_id_.find(id);
    if (it->second.collective.expired()) {
      by_id_.erase(it);
      continue;
    }
    it->second.held.clear();
    kept.push_back(std::move(id));
  }
  oldest_first_ = std::move(kept);
}

void AttemptCache::Clear() {
  by_id_.clear();
  oldest_first_.clear();
}

}  // namespace reducer

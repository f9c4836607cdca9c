#include "server/jobs/attempt_cache.h"

#include <utility>

namespace reducer {

std::optional<std::weak_ptr<Collective>> AttemptCache::Find(
    const std::string& attempt_id) const {
  auto it = by_id_.find(attempt_id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

void AttemptCache::Remember(const std::string& attempt_id,
                            std::weak_ptr<Collective> collective) {
  auto [it, inserted] = by_id_.insert_or_assign(attempt_id, std::move(collective));
  if (!inserted) return;
  oldest_first_.push_back(attempt_id);
  if (oldest_first_.size() > capacity_) {
    by_id_.erase(oldest_first_.front());
    oldest_first_.pop_front();
  }
}

void AttemptCache::Clear() {
  by_id_.clear();
  oldest_first_.clear();
}

}  // namespace reducer

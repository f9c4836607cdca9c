#include "server/jobs/failed_collectives.h"

#include <algorithm>
#include <utility>

namespace reducer {
namespace {

// A hash map slot and a std::map node, beyond what they point to.
constexpr size_t kTableOverheadBytes = 128;

}  // namespace

size_t FailedCollectives::EntryBytes(const std::string& key,
                                     const absl::Status& status,
                                     size_t group_size) {
  // The key is kept twice (the entry's and its age's), the message once.
  return sizeof(Entry) + kTableOverheadBytes + 2 * key.size() +
         status.message().size() + group_size * sizeof(int);
}

void FailedCollectives::Add(std::string key, absl::Status status,
                            std::vector<int> to_tell,
                            std::vector<MemoryReservation> held) {
  std::sort(to_tell.begin(), to_tell.end());
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    by_age_.erase(it->second.age);
    entries_.erase(it);
  }
  const uint64_t age = next_age_++;
  by_age_.emplace(age, key);
  entries_.emplace(std::move(key), Entry{std::move(status), std::move(to_tell),
                                         std::move(held), age});
}

std::optional<absl::Status> FailedCollectives::Take(const std::string& key,
                                                    int rank) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  std::vector<int>& to_tell = it->second.to_tell;
  auto r = std::lower_bound(to_tell.begin(), to_tell.end(), rank);
  if (r == to_tell.end() || *r != rank) return std::nullopt;
  to_tell.erase(r);
  absl::Status status = it->second.status;
  if (to_tell.empty()) {
    by_age_.erase(it->second.age);
    entries_.erase(it);
  }
  return status;
}

bool FailedCollectives::ForgetOldest() {
  if (by_age_.empty()) return false;
  auto oldest = by_age_.begin();
  entries_.erase(oldest->second);
  by_age_.erase(oldest);
  return true;
}

void FailedCollectives::Clear() {
  entries_.clear();
  by_age_.clear();
}

}  // namespace reducer

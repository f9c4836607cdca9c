#include "server/engine/kept_results.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace reducer {

bool KeptResults::Reserve(size_t result_bytes) {
  const size_t bytes = result_bytes + entry_bytes_;
  if (bytes > budget_->limit() / 8) return false;
  absl::MutexLock lock(&mu_);
  while (!budget_->TryReserve(bytes)) {
    if (oldest_first_.empty()) return false;
    PopOldestLocked();
  }
  return true;
}

void KeptResults::Unreserve(size_t result_bytes) {
  budget_->Release(result_bytes + entry_bytes_);
}

void KeptResults::Keep(const std::string& attempt_id, int rank,
                       std::vector<TensorSpec> declared,
                       std::vector<ResultMessage> messages,
                       size_t result_bytes) {
  const size_t bytes = result_bytes + entry_bytes_;
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  ForgetLocked(attempt_id);
  Entry entry;
  entry.rank = rank;
  const size_t slash = attempt_id.rfind('/');
  if (slash != std::string::npos) {
    entry.session_id = attempt_id.substr(0, slash);
    if (!absl::SimpleAtoi(absl::string_view(attempt_id).substr(slash + 1),
                          &entry.number)) {
      entry.number = 0;
    }
  }
  entry.kept.declared = std::move(declared);
  entry.kept.messages = std::move(messages);
  entry.bytes = bytes;
  entry.kept_at = now;
  bytes_ += bytes;
  by_session_[entry.session_id].emplace(entry.number, attempt_id);
  by_attempt_[attempt_id] = std::move(entry);
  oldest_first_.emplace_back(now, attempt_id);
}

std::optional<KeptResults::Kept> KeptResults::Find(
    const std::string& attempt_id, int rank) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(clock_->Now());
  auto it = by_attempt_.find(attempt_id);
  if (it == by_attempt_.end() || it->second.rank != rank) return std::nullopt;
  return it->second.kept;
}

void KeptResults::Acknowledge(const std::string& session_id, uint64_t below,
                              absl::Span<const uint64_t> received) {
  absl::MutexLock lock(&mu_);
  auto session = by_session_.find(session_id);
  if (session == by_session_.end()) return;
  std::vector<std::string> settled;
  const std::multimap<uint64_t, std::string>& numbers = session->second;
  for (auto it = numbers.begin(); it != numbers.end() && it->first < below; ++it) {
    settled.push_back(it->second);
  }
  for (uint64_t number : received) {
    if (number < below) continue;  // settled above
    auto [first, last] = numbers.equal_range(number);
    for (auto it = first; it != last; ++it) settled.push_back(it->second);
  }
  // ForgetLocked erases from `numbers` (and may erase the session).
  for (const std::string& attempt_id : settled) ForgetLocked(attempt_id);
  // Acknowledgements come mostly in order: drop what they emptied.
  while (!oldest_first_.empty() &&
         !by_attempt_.contains(oldest_first_.front().second)) {
    oldest_first_.pop_front();
  }
}

void KeptResults::Clear() {
  absl::MutexLock lock(&mu_);
  budget_->Release(bytes_);
  bytes_ = 0;
  by_attempt_.clear();
  by_session_.clear();
  oldest_first_.clear();
}

size_t KeptResults::size() {
  absl::MutexLock lock(&mu_);
  return by_attempt_.size();
}

size_t KeptResults::bytes() {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void KeptResults::ForgetLocked(const std::string& attempt_id) {
  auto it = by_attempt_.find(attempt_id);
  if (it == by_attempt_.end()) return;
  budget_->Release(it->second.bytes);
  bytes_ -= it->second.bytes;
  auto session = by_session_.find(it->second.session_id);
  if (session != by_session_.end()) {
    auto [first, last] = session->second.equal_range(it->second.number);
    for (auto at = first; at != last; ++at) {
      if (at->second == attempt_id) {
        session->second.erase(at);
        break;
      }
    }
    if (session->second.empty()) by_session_.erase(session);
  }
  by_attempt_.erase(it);
}

void KeptResults::PopOldestLocked() {
  const auto& [kept_at, attempt_id] = oldest_first_.front();
  auto it = by_attempt_.find(attempt_id);
  if (it != by_attempt_.end() && it->second.kept_at == kept_at) {
    ForgetLocked(attempt_id);
  }
  oldest_first_.pop_front();
}

void KeptResults::ExpireLocked(absl::Time now) {
  while (!oldest_first_.empty() &&
         oldest_first_.front().first + keep_for_ <= now) {
    PopOldestLocked();
  }
}

}  // namespace reducer

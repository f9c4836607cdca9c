#include "server/kept_results.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace reducer {

bool KeptResults::Reserve(size_t bytes) {
  if (bytes > budget_->limit() / 8) return false;
  absl::MutexLock lock(&mu_);
  while (!budget_->TryReserve(bytes)) {
    if (oldest_first_.empty()) return false;
    ForgetLocked(oldest_first_.front().second);
    oldest_first_.pop_front();
  }
  return true;
}

void KeptResults::Unreserve(size_t bytes) { budget_->Release(bytes); }

void KeptResults::Keep(const std::string& attempt_id, int rank,
                       std::vector<TensorSpec> declared,
                       std::vector<ResultMessage> messages, size_t bytes) {
  const absl::Time now = absl::Now();
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
  by_attempt_[attempt_id] = std::move(entry);
  oldest_first_.emplace_back(now, attempt_id);
}

std::optional<KeptResults::Kept> KeptResults::Find(
    const std::string& attempt_id, int rank) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(absl::Now());
  auto it = by_attempt_.find(attempt_id);
  if (it == by_attempt_.end() || it->second.rank != rank) return std::nullopt;
  return it->second.kept;
}

void KeptResults::Acknowledge(const std::string& session_id, uint64_t below,
                              absl::Span<const uint64_t> received) {
  absl::MutexLock lock(&mu_);
  for (auto it = by_attempt_.begin(); it != by_attempt_.end();) {
    auto current = it++;
    const Entry& e = current->second;
    if (e.session_id == session_id &&
        (e.number < below || std::find(received.begin(), received.end(),
                                       e.number) != received.end())) {
      budget_->Release(e.bytes);
      bytes_ -= e.bytes;
      by_attempt_.erase(current);
    }
  }
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
  by_attempt_.erase(it);
}

void KeptResults::ExpireLocked(absl::Time now) {
  while (!oldest_first_.empty() &&
         oldest_first_.front().first + keep_for_ <= now) {
    const std::string& attempt_id = oldest_first_.front().second;
    auto it = by_attempt_.find(attempt_id);
    // Only the entry kept at that time: a replaced one is younger.
    if (it != by_attempt_.end() &&
        it->second.kept_at == oldest_first_.front().first) {
      ForgetLocked(attempt_id);
    }
    oldest_first_.pop_front();
  }
}

}  // namespace reducer

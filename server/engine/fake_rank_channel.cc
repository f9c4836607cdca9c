#include "server/engine/fake_rank_channel.h"

#include <cstring>
#include <utility>

#include "server/engine/shared_bytes.h"

namespace reducer {

void FakeRankChannel::Send(ResultMessage message, bool last) {
  SentMessage sent;
  sent.offset = message.offset;
  if (message.result_specs != nullptr) {
    sent.has_specs = true;
    sent.result = *message.result_specs;
  }
  for (const SharedBytes& piece : message.data) {
    sent.data.append(piece.data(), piece.size());
    sent.pieces.emplace_back(piece.owner().get(), piece.data());
  }
  sent.last = last;
  absl::MutexLock lock(&mu_);
  if (keep_unwritten_ && message.hold != nullptr) {
    unwritten_holds_.push_back(std::move(message.hold));
  }
  if (!last) ++unacknowledged_;
  messages_.push_back(std::move(sent));
  if (last) finished_ok_ = true;
}

void FakeRankChannel::KeepUnwritten() {
  absl::MutexLock lock(&mu_);
  keep_unwritten_ = true;
}

void FakeRankChannel::WriteKept() {
  std::vector<std::shared_ptr<const void>> written;
  {
    absl::MutexLock lock(&mu_);
    written.swap(unwritten_holds_);
  }
}

void FakeRankChannel::FinishWhenSent() {
  absl::MutexLock lock(&mu_);
  finished_ok_ = true;
}

void FakeRankChannel::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  failure_ = status;
  ++fail_calls_;
}

void FakeRankChannel::ResumeReading() {
  absl::MutexLock lock(&mu_);
  ++resumes_;
}

bool FakeRankChannel::WaitEnded(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &FakeRankChannel::Ended),
                              timeout);
}

bool FakeRankChannel::WaitMessages(size_t n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return messages_.size() >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

std::string FakeRankChannel::result() {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const SentMessage& m : messages_) {
    if (out.size() < m.offset + m.data.size()) {
      out.resize(m.offset + m.data.size(), '\xee');
    }
    if (!m.data.empty()) {
      std::memcpy(&out[m.offset], m.data.data(), m.data.size());
    }
  }
  return out;
}

std::string FakeRankChannel::bytes() {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const SentMessage& m : messages_) out += m.data;
  return out;
}

size_t FakeRankChannel::byte_count() {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const SentMessage& m : messages_) n += m.data.size();
  return n;
}

int FakeRankChannel::message_count() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(messages_.size());
}

int FakeRankChannel::headers() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const SentMessage& m : messages_) n += m.has_specs ? 1 : 0;
  return n;
}

std::vector<TensorSpec> FakeRankChannel::specs() {
  absl::MutexLock lock(&mu_);
  for (auto m = messages_.rbegin(); m != messages_.rend(); ++m) {
    if (m->has_specs) return m->result;
  }
  return {};
}

int FakeRankChannel::TakeUnacknowledged() {
  absl::MutexLock lock(&mu_);
  const int n = unacknowledged_;
  unacknowledged_ = 0;
  return n;
}

}  // namespace reducer

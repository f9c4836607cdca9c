// RelayCollective's split (relay_collective.h, "Split"): its members going
// upstream each on its own, when they disagree here or some are late. The
// rest of RelayCollective is in relay_collective.cc.
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/relay/relay_collective.h"
#include "server/relay/result_messages.h"

namespace reducer {

void RelayCollective::OnStragglerDeadline() {
  std::vector<std::function<void()>> starts;
  {
    absl::MutexLock lock(&mu_);
    if (started_ || failed_ || split_) return;
    starts = SplitLocked();
  }
  for (const std::function<void()>& start : starts) start();
}

std::vector<std::function<void()>> RelayCollective::SplitLocked() {
  if (deadline_.has_value()) {
    env_.timers->Cancel(*deadline_);
    deadline_.reset();
  }
  split_ = true;
  std::vector<std::function<void()>> starts;
  for (size_t m = 0; m < members_.size() && !failed_; ++m) {
    if (!members_[m].attached) continue;
    if (std::function<void()> start = StartAloneLocked(static_cast<int>(m))) {
      starts.push_back(std::move(start));
    }
  }
  if (failed_) starts.clear();
  return starts;
}

std::function<void()> RelayCollective::StartAloneLocked(int m) {
  Member& member = members_[m];
  member.own_reserved = MemoryReservation::Try(env_.memory, member.input_bytes);
  if (!member.own_reserved->ok()) {
    FailLocked(absl::ResourceExhaustedError(absl::StrCat(
        description_, ": the relay's memory budget of ", env_.memory->limit(),
        " bytes cannot hold rank ", member.rank, "'s ", member.input_bytes,
        " bytes for upstream (", env_.memory->used(),
        " in use); retry later or raise the limit")));
    return nullptr;
  }
  member.own_input =
      std::make_shared<UpstreamInput>(member.input_bytes, env_.buffers);
  std::vector<std::pair<uint64_t, Payload>> held = std::move(member.held);
  for (auto& [offset, data] : held) {
    absl::Status placed = PlaceLocked(m, offset, data);
    if (!placed.ok()) {
      FailLocked(placed);
      return nullptr;
    }
  }
  member.own_input->MarkReady(member.received);
  const v1::CollectiveHeader header = ForwardedHeader(member.header);
  std::shared_ptr<UpstreamInput> input = member.own_input;
  std::weak_ptr<RelayCollective> weak = weak_from_this();
  std::shared_ptr<UpstreamSession> session = session_;
  return [session, header, input, weak, rank = member.rank] {
    session->Start(header, input, /*into=*/nullptr,
                   [weak, rank](absl::StatusOr<UpstreamResult> result) {
                     if (auto self = weak.lock()) {
                       self->OnAloneDone(rank, std::move(result));
                     }
                   });
  };
}

void RelayCollective::OnAloneDone(int rank,
                                  absl::StatusOr<UpstreamResult> result) {
  {
    absl::MutexLock lock(&mu_);
    const int m = IndexOf(rank);
    if (m < 0 || failed_) return;
    Member& member = members_[m];
    member.own_reserved.reset();  // the upstream call read all of it
    if (!result.ok()) {
      if (!member.finished) member.channel->Fail(result.status());
      member.finished = true;
      member.to_send.clear();
    } else {
      DeliverLocked(m, ResultMessagesOf(&*result, env_.chunk_bytes));
    }
  }
  MaybeDone();
}

}  // namespace reducer

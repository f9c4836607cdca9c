#include "server/jobs/job_door.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// How much of LeaveRequest.cause a job's abort message repeats.
constexpr size_t kMaxLeaveCauseBytes = 2048;

// `text`'s first `max_bytes` bytes or fewer, never ending inside a UTF-8
// sequence (the result goes into string fields, which must be UTF-8).
std::string Utf8Prefix(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return text.substr(0, end);
}

}  // namespace

JobDoor::JobDoor(JobRegistry* registry, MetricsSink* metrics, JobTokens* tokens,
                 size_t max_name_bytes)
    : registry_(registry),
      metrics_(metrics),
      tokens_(tokens),
      max_name_bytes_(max_name_bytes) {}

absl::Status JobDoor::Refuse(absl::Status invalid) const {
  metrics_->RequestRefused(invalid.code(), RefusedLimit::kNone);
  return invalid;
}

absl::Status JobDoor::CheckName(absl::string_view field,
                                absl::string_view value) const {
  if (value.size() <= max_name_bytes_) return absl::OkStatus();
  return Refuse(absl::InvalidArgumentError(absl::StrCat(
      field, " is ", value.size(), " bytes long, over the limit of ",
      max_name_bytes_, " bytes (--max_name_bytes)")));
}

size_t JobDoor::max_join_request_bytes() const {
  return 2 * max_name_bytes_ + kMaxJoinShardListBytes + 2 * kMaxJoinShards +
         5 * kMaxJoinRanks + kJoinFramingBytes;
}

absl::Status JobDoor::CheckJoin(const v1::JoinRequest& request) const {
  REDUCER_RETURN_IF_ERROR(CheckName("JoinRequest.job", request.job()));
  REDUCER_RETURN_IF_ERROR(
      CheckName("JoinRequest.session_id", request.session_id()));
  if (request.shards_size() > kMaxJoinShards) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest.shards names ", request.shards_size(),
        " addresses, over the limit of ", kMaxJoinShards, " shards")));
  }
  if (request.ranks_size() > kMaxJoinRanks) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest.ranks names ", request.ranks_size(),
        " ranks, over the limit of ", kMaxJoinRanks, " in one session")));
  }
  size_t shard_bytes = 0;
  for (int i = 0; i < request.shards_size(); ++i) {
    REDUCER_RETURN_IF_ERROR(CheckName(
        absl::StrCat("JoinRequest.shards[", i, "]"), request.shards(i)));
    shard_bytes += request.shards(i).size();
  }
  if (shard_bytes > kMaxJoinShardListBytes) {
    return Refuse(absl::InvalidArgumentError(
        absl::StrCat("JoinRequest.shards holds ", shard_bytes,
                     " bytes of addresses, over the limit of ",
                     kMaxJoinShardListBytes, " bytes")));
  }
  // A transport hands the Join over whole (gRPC has no receive limit per
  // method: it reads any message up to its server-wide limit before a
  // handler runs). What this bounds is what a Join makes reducerd keep and
  // work on past its arrival: fields this reducerd does not know are kept
  // with the message.
  if (const size_t bytes = request.ByteSizeLong();
      bytes > max_join_request_bytes()) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "JoinRequest is ", bytes, " bytes, over the limit of ",
        max_join_request_bytes(),
        " bytes (its names within --max_name_bytes, its shard list within ",
        kMaxJoinShardListBytes,
        " bytes; fields this reducerd does not know "
        "count too)")));
  }
  return absl::OkStatus();
}

absl::Status JobDoor::CheckNames(const v1::CollectiveHeader& header) const {
  REDUCER_RETURN_IF_ERROR(CheckName("CollectiveHeader.job", header.job()));
  REDUCER_RETURN_IF_ERROR(
      CheckName("CollectiveHeader.session_id", header.session_id()));
  REDUCER_RETURN_IF_ERROR(CheckName("CollectiveHeader.name", header.name()));
  REDUCER_RETURN_IF_ERROR(
      CheckName("CollectiveHeader.attempt_id", header.attempt_id()));
  return absl::OkStatus();
}

absl::Status JobDoor::Authorize(absl::string_view job,
                                const PresentedToken& token) {
  if (tokens_ == nullptr) return absl::OkStatus();
  absl::Status allowed = tokens_->Check(job, token);
  if (!allowed.ok()) metrics_->RequestRefused(allowed.code(), RefusedLimit::kNone);
  return allowed;
}

absl::Status JobDoor::AuthorizeAnyJob(const PresentedToken& token) {
  if (tokens_ == nullptr) return absl::OkStatus();
  absl::Status known = tokens_->CheckAnyJob(token);
  if (!known.ok()) metrics_->RequestRefused(known.code(), RefusedLimit::kNone);
  return known;
}

absl::Status JobDoor::Join(const v1::JoinRequest& request,
                           const PresentedToken& token,
                           std::shared_ptr<SessionChannel> session) {
  REDUCER_RETURN_IF_ERROR(CheckJoin(request));
  absl::Status allowed = Authorize(request.job(), token);
  if (!allowed.ok()) return allowed;
  return registry_->Join(request, std::move(session));
}

void JobDoor::Leave(const std::string& job, const std::string& session_id,
                    const SessionChannel* owner, const std::string& why,
                    EpochEndReason reason) {
  registry_->Leave(job, session_id, owner, why, reason);
}

absl::Status JobDoor::Leave(const v1::LeaveRequest& request,
                            const PresentedToken& token) {
  REDUCER_RETURN_IF_ERROR(CheckName("LeaveRequest.job", request.job()));
  REDUCER_RETURN_IF_ERROR(
      CheckName("LeaveRequest.session_id", request.session_id()));
  absl::Status allowed = Authorize(request.job(), token);
  if (!allowed.ok()) return allowed;
  if (request.ranks_size() > kMaxJoinRanks) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "LeaveRequest.ranks names ", request.ranks_size(),
        " ranks, over the limit of ", kMaxJoinRanks, " in one session")));
  }
  if (request.ranks_size() > 0 && request.cause().empty()) {
    registry_->DepartRanks(
        request.job(), request.session_id(),
        std::vector<int>(request.ranks().begin(), request.ranks().end()));
  } else if (request.ranks_size() > 0) {
    registry_->LoseRanks(
        request.job(), request.session_id(),
        std::vector<int>(request.ranks().begin(), request.ranks().end()),
        Utf8Prefix(request.cause(), kMaxLeaveCauseBytes));
  } else if (request.cause().empty()) {
    registry_->Depart(request.job(), request.session_id());
  } else {
    registry_->EndForOtherShard(
        request.job(), request.session_id(),
        Utf8Prefix(request.cause(), kMaxLeaveCauseBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<AttachedCollective>> JobDoor::Attach(
    const v1::CollectiveHeader& header, const PresentedToken& token,
    std::shared_ptr<RankChannel> channel) {
  REDUCER_RETURN_IF_ERROR(CheckCall(header, token));
  return AttachChecked(header, std::move(channel));
}

absl::Status JobDoor::CheckCall(const v1::CollectiveHeader& header,
                                const PresentedToken& token) {
  REDUCER_RETURN_IF_ERROR(CheckNames(header));
  return Authorize(header.job(), token);
}

absl::StatusOr<std::shared_ptr<AttachedCollective>> JobDoor::AttachChecked(
    const v1::CollectiveHeader& header, std::shared_ptr<RankChannel> channel) {
  absl::StatusOr<std::shared_ptr<Job>> job = registry_->Find(header.job());
  if (!job.ok() && header.replay() &&
      job.status().code() == absl::StatusCode::kFailedPrecondition) {
    return registry_->ReplayForFreedJob(header, std::move(channel));
  }
  absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
      job.ok() ? (*job)->AttachCall(header, channel) : job.status();
  // The job may have been freed and joined again since the attempt: the
  // freed one has its result.
  if (header.replay() && attached.status().code() == absl::StatusCode::kNotFound) {
    absl::StatusOr<std::shared_ptr<AttachedCollective>> freed =
        registry_->ReplayForFreedJob(header, std::move(channel));
    if (freed.status().code() != absl::StatusCode::kNotFound) return freed;
  }
  // Refusals over a limit are counted where the limit is known, and so
  // are the collective's own.
  if (!attached.ok() &&
      attached.status().code() != absl::StatusCode::kResourceExhausted &&
      !IsRefusedByCollective(attached.status())) {
    metrics_->RequestRefused(attached.status().code(), RefusedLimit::kNone);
  }
  return attached;
}

absl::StatusOr<uint64_t> JobDoor::CheckSeat(const std::string& job,
                                            const std::string& session_id,
                                            int rank,
                                            const PresentedToken& token) {
  REDUCER_RETURN_IF_ERROR(Authorize(job, token));
  REDUCER_ASSIGN_OR_RETURN(std::shared_ptr<Job> found, registry_->Find(job));
  const std::optional<Job::Seat> seat = found->RunningSeat(session_id);
  if (!seat.has_value() || !seat->Holds(rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", session_id, " does not hold rank ", rank,
        " in the running epoch of job ", job,
        " (it never joined, was replaced, or the epoch ended)"));
  }
  return seat->epoch_id;
}

JobDoor::AttachFn JobDoor::AttachWithToken(const PresentedToken& token) {
  return [this, token](const v1::CollectiveHeader& header,
                       std::shared_ptr<RankChannel> channel) {
    return Attach(header, token, std::move(channel));
  };
}

JobDoor::AttachFn JobDoor::AttachForStream(
    const PresentedToken& token, std::shared_ptr<HeldStreamShares> held) {
  return [this, token, held](const v1::CollectiveHeader& header,
                             std::shared_ptr<RankChannel> channel)
             -> absl::StatusOr<std::shared_ptr<AttachedCollective>> {
    REDUCER_RETURN_IF_ERROR(CheckCall(header, token));
    REDUCER_RETURN_IF_ERROR(held->Hold(
        header.job(), [&] { return TenantOf(tokens_, header.job()); }));
    absl::StatusOr<std::shared_ptr<AttachedCollective>> attached =
        AttachChecked(header, std::move(channel));
    held->Settle(attached.ok());
    return attached;
  };
}

std::string JobDoor::TenantOfToken(const PresentedToken& token) {
  return tokens_ == nullptr ? std::string() : tokens_->TenantOfToken(token);
}

}  // namespace reducer

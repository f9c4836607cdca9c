#include "client/shards/sharded_backend.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/internal/settled_attempt.h"
#include "client/retry_sequence.h"
#include "client/shards/partition_split.h"

namespace reducer {

// The attempt of one collective over its shards.
class ShardedAttempt final : public CollectiveAttempt {
 public:
  ShardedAttempt(const ShardedBackend* owner, const Contribution& whole)
      : owner_(owner), whole_(whole),
        split_(SplitContribution(whole, static_cast<int>(owner->shards_.size()),
                                 owner->min_partition_bytes_)),
        parts_(split_.parts.size()) {
    for (size_t k = 0; k < parts_.size(); ++k) {
      PartitionContribution& part = split_.parts[k];
      part.contribution.header.set_epoch(owner_->shards_[part.shard]->epoch());
      parts_[k].attempt = ShardOf(k)->backend()->Start(part.contribution);
      parts_[k].retries = RetrySequence(whole.deadline);
    }
  }

  ~ShardedAttempt() override {
    // Nothing may still read caller memory (or split_'s) once this is gone.
    absl::MutexLock lock(&mu_);
    GiveUpRestLocked(/*take_lower_verdicts=*/false);
  }

  absl::StatusOr<std::vector<Tensor>> Wait() override {
    absl::MutexLock lock(&mu_);
    for (;;) {
      HarvestLocked();
      if (!failure_.ok()) {
        GiveUpRestLocked(/*take_lower_verdicts=*/true);
        return failure_;
      }
      if (AllDoneLocked()) break;
      absl::Time wake = whole_.deadline;
      for (const Part& part : parts_) {
        if (part.attempt == nullptr && !part.result.has_value()) {
          wake = std::min(wake, part.retry_at);
        }
      }
      if (absl::Now() >= whole_.deadline) {
        // Every part gives up by its deadline; take what they say.
        for (Part& part : parts_) {
          if (part.attempt != nullptr) TakeOutcomeLocked(&part);
        }
        if (failure_.ok() && !AllDoneLocked()) {
          failure_ = absl::DeadlineExceededError(
              "the collective's deadline passed while a partition was to be "
              "retried");
        }
        continue;
      }
      owner_->driver_->DriveUntil([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return AnySettledLocked();
      }, wake);
    }
    std::vector<std::vector<Tensor>> results;
    results.reserve(parts_.size());
    for (Part& part : parts_) results.push_back(std::move(*part.result));
    return JoinPartitionResults(whole_, split_, &results, owner_->buffers_);
  }

  bool Ready() override {
    owner_->driver_->PollReady();
    absl::MutexLock lock(&mu_);
    HarvestLocked();
    return !failure_.ok() || AllDoneLocked();
  }

  bool Settled() override {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return true;
    for (const Part& part : parts_) {
      if (part.result.has_value()) continue;
      if (part.attempt == nullptr || !part.attempt->Settled()) return false;
    }
    return true;
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) {
      failure_ = absl::CancelledError("the collective call was given up");
    }
    for (Part& part : parts_) {
      if (part.attempt != nullptr) part.attempt->Cancel();
    }
  }

  // Partitions replay and retry on their own; see ShardedBackend.
  bool received_any() const override { return true; }
  bool retries_itself() const override { return true; }

 private:
  struct Part {
    std::unique_ptr<CollectiveAttempt> attempt;  // null: done, or to retry
    std::optional<std::vector<Tensor>> result;   // once it succeeded
    absl::Time retry_at = absl::InfiniteFuture();  // when attempt is null
    RetrySequence retries;  // its replays and resends once it failed
    Contribution replay_contribution;  // the part's, as a replay sends it
  };

  ShardEndpoint* ShardOf(size_t k) const {
    return owner_->shards_[split_.parts[k].shard];
  }

  bool AllDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Part& part : parts_) {
      if (!part.result.has_value()) return false;
    }
    return true;
  }

  // True when a part's outcome came in or a retry is due. Never polls.
  bool AnySettledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    for (const Part& part : parts_) {
      if (part.result.has_value()) continue;
      if (part.attempt == nullptr ? part.retry_at <= now
                                  : part.attempt->Settled()) {
        return true;
      }
    }
    return false;
  }

  // Takes the outcome of every settled part and resends the parts whose
  // retry is due; sets failure_ at the first part that failed for good.
  void HarvestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    for (size_t k = 0; k < parts_.size() && failure_.ok(); ++k) {
      Part& part = parts_[k];
      if (part.result.has_value()) continue;
      if (part.attempt == nullptr) {
        if (part.retry_at <= now) {
          part.retry_at = absl::InfiniteFuture();
          part.attempt = ShardOf(k)->backend()->Start(
              part.retries.replaying() ? part.replay_contribution
                                       : split_.parts[k].contribution);
        }
        continue;
      }
      if (part.attempt->Settled()) TakeOutcomeLocked(&part);
    }
  }

  // Waits for `part`'s attempt (settled, or past its deadline) and files
  // its outcome: a result, a replay or a resend when its retries say so
  // (client/retry_sequence.h, as for a whole collective), or failure_.
  void TakeOutcomeLocked(Part* part) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t k = static_cast<size_t>(part - parts_.data());
    absl::StatusOr<std::vector<Tensor>> outcome = part->attempt->Wait();
    const bool received_any = part->attempt->received_any();
    part->attempt.reset();
    if (outcome.ok()) {
      part->result = *std::move(outcome);
      return;
    }
    const RetrySequence::Next next = part->retries.AfterFailure(
        outcome.status(), received_any, owner_->session_status_(), absl::Now());
    if (next == RetrySequence::Next::kStop) {
      if (failure_.ok()) {
        failure_ = NameShard(k, part->retries.failure());
        failed_part_ = k;
      }
      return;
    }
    if (next == RetrySequence::Next::kReplay) {
      part->replay_contribution = split_.parts[k].contribution.AsReplay();
    }
    part->retry_at = part->retries.next_at();
  }

  // Waits for the parts still running, until they let go of memory. They
  // are not cancelled: a cancelled Collective stream whose writes were
  // under way was seen, under faults, never to be handed back by gRPC,
  // which would hang the caller here. Each part ends by its own deadline
  // at the latest, and in practice at once: every rank sent its
  // partitions together, and a lost shard or rank ends the epoch on the
  // others (the session passes a shard's failure on), which fails them.
  //
  // With `take_lower_verdicts`, when failure_ is a verdict on the
  // collective (IsVerdict), a part below the one that failed first that
  // ends with a verdict too becomes the failure: every rank then reports
  // the lowest partition's verdict, the same on every rank whatever order
  // its parts' answers came in (each shard judges its partition once, for
  // every rank; two shards may name different pairs of a mismatch, as each
  // compares with the rank that reached it first).
  void GiveUpRestLocked(bool take_lower_verdicts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool verdict = take_lower_verdicts && IsVerdict(failure_);
    for (size_t k = 0; k < parts_.size(); ++k) {
      Part& part = parts_[k];
      if (part.attempt == nullptr) continue;
      const absl::Status ended = part.attempt->Wait().status();
      part.attempt.reset();
      if (verdict && k < failed_part_ && IsVerdict(ended)) {
        failure_ = NameShard(k, ended);
        failed_part_ = k;
      }
    }
  }

  // A shard's judgement of the collective itself, the same for every rank
  // (a mismatch, a refused argument), rather than of one rank's transport.
  static bool IsVerdict(const absl::Status& status) {
    return status.code() == absl::StatusCode::kFailedPrecondition ||
           status.code() == absl::StatusCode::kInvalidArgument;
  }

  // `status` of part k, prefixed with its shard (and partition, when the
  // collective was cut).
  absl::Status NameShard(size_t k, const absl::Status& status) const {
    return reducer::NameShard(
        status, split_.parts[k].shard, owner_->shards_.size(), ShardOf(k)->target(),
        split_.whole ? std::string()
                     : absl::StrCat(" (partition ", k + 1, " of ", split_.parts.size(), ")"));
  }

  const ShardedBackend* const owner_;
  const Contribution& whole_;  // the caller's; outlives the attempt
  SplitCollective split_;       // read by the parts' attempts
  absl::Mutex mu_;
  std::vector<Part> parts_ ABSL_GUARDED_BY(mu_);  // parts_[k]: split_.parts[k]'s
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // The part whose failure failure_ is (SIZE_MAX: none, or not a part's).
  size_t failed_part_ ABSL_GUARDED_BY(mu_) = SIZE_MAX;
};

std::unique_ptr<CollectiveAttempt> ShardedBackend::Start(
    const Contribution& contribution) {
  // Splitting reads the inputs (a reduce-scatter gathers its partitions'
  // pieces), and such partitions carry no gate: device staging's copies
  // (or a relay's combining) must be done first. An all-reduce's partitions
  // read theirs through gates of their own, and one shard takes the
  // contribution whole, gate included.
  if (shards_.size() > 1 && !PartitionsReadInPlace(contribution)) {
    absl::Status ready = contribution.AwaitPayload(contribution.payload_bytes());
    if (!ready.ok()) return std::make_unique<FailedAttempt>(std::move(ready));
  }
  return std::make_unique<ShardedAttempt>(this, contribution);
}

}  // namespace reducer

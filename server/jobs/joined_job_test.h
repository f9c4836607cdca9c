// The fixture of the Job's in-process tests: job "j1" of kWorld ranks on a
// JobTestEnv, every rank joined (epoch 1 runs) through a FakeSession, and
// the calls the tests make of it.
#ifndef REDUCER_SERVER_JOBS_JOINED_JOB_TEST_H_
#define REDUCER_SERVER_JOBS_JOINED_JOB_TEST_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/string_bytes.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job.h"

namespace reducer {

class JoinedJobTest : public ::testing::Test {
 protected:
  static constexpr int kWorld = 3;

  JoinedJobTest() : job_("j1", kWorld, server_.env()) {
    for (int r = 0; r < kWorld; ++r) {
      sessions_.push_back(std::make_shared<FakeSession>());
      EXPECT_TRUE(job_.Join(r, kWorld, Session(r), sessions_.back()).ok());
    }
  }

  // The id of `rank`'s session; a rank that joins again uses the next
  // `incarnation`.
  static std::string Session(int rank, int incarnation = 0) {
    return absl::StrCat("s", rank, "-", incarnation);
  }

  // The stream of `rank`'s first session ended (`why` says how): the job's
  // Leave with that session's own channel; true when the job is empty.
  bool Lose(int rank, const std::string& why,
            EpochEndReason reason = EpochEndReason::kSessionCancelled) {
    return job_.Leave(Session(rank), sessions_[rank].get(), why, reason);
  }

  // A header of `rank`'s call of `kind` in epoch 1, from its first session,
  // with a 10 s timeout.
  static v1::CollectiveHeader Header(int rank, v1::CollectiveKind kind) {
    v1::CollectiveHeader h;
    h.set_job("j1");
    h.set_epoch(1);
    h.set_session_id(Session(rank));
    h.set_rank(rank);
    h.set_kind(kind);
    h.set_timeout_ms(10000);
    return h;
  }

  // Attaches `h` on a new channel, then feeds `payload` if it is not
  // empty. A call the job refused fails its channel with the refusal (one
  // the collective refused was told why already).
  std::shared_ptr<FakeRankChannel> Attach(const v1::CollectiveHeader& h,
                                          const std::string& payload = "") {
    auto channel = std::make_shared<FakeRankChannel>();
    absl::StatusOr<std::shared_ptr<Collective>> c = job_.Attach(h, channel);
    if (!c.ok()) {
      if (!IsRefusedByCollective(c.status())) channel->Fail(c.status());
      return channel;
    }
    if (!payload.empty()) {
      Payload p;
      p.Append(StringBytes(payload));
      (*c)->OnData(h.rank(), 0, std::move(p));
    }
    return channel;
  }

  // The result bytes `channel` got, as values of type T.
  template <typename T>
  static std::vector<T> Values(FakeRankChannel& channel) {
    return ResultValues<T>(channel);
  }

  JobTestEnv server_;
  std::vector<std::shared_ptr<FakeSession>> sessions_;
  Job job_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOINED_JOB_TEST_H_

// JobDoorTestEnv: a real JobDoor over a real JobRegistry, on JobTestEnv's
// defaults, all in this process (no reducerd): what the door's own test
// and the transports' tests (server/grpc, server/shm) enter jobs through.
// It records the requests the door refuses; with `tokens`, job kTokenJob
// (and every job under it) requires kToken.
//
//   JobDoorTestEnv env;
//   ASSERT_THAT(env.Join("j", /*rank=*/0, /*world=*/1, "s", session), IsOk());
//   env.door().Attach(JobDoorTestEnv::AllReduce("j", "s", 0, 1), {}, channel);
//
// Thread-safe as the door is. Must outlive every session and channel given
// to the door.
#ifndef REDUCER_SERVER_JOBS_JOB_DOOR_TEST_ENV_H_
#define REDUCER_SERVER_JOBS_JOB_DOOR_TEST_ENV_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/jobs/fake_job_channels.h"
#include "server/jobs/job_door.h"
#include "server/jobs/job_registry.h"
#include "server/metrics/metrics_sink.h"
#include "server/security/job_tokens.h"

namespace reducer {

// Records every request refused, by code. Thread-safe.
class RefusalRecorder final : public MetricsSink {
 public:
  void RequestRefused(absl::StatusCode code, RefusedLimit) override {
    absl::MutexLock lock(&mu_);
    refused_.push_back(code);
  }
  std::vector<absl::StatusCode> refused() {
    absl::MutexLock lock(&mu_);
    return refused_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::StatusCode> refused_ ABSL_GUARDED_BY(mu_);
};

class JobDoorTestEnv {
 public:
  static constexpr char kTokenJob[] = "secured";
  static constexpr char kToken[] = "secret-of-secured";
  // Names longer than this are refused.
  static constexpr size_t kMaxNameBytes = 64;
  // Each element of the float32 tensors AllReduce names.
  static constexpr int kFloats = 4;

  explicit JobDoorTestEnv(bool tokens = false, EngineOptions options = {})
      : jobs_(std::move(options)),
        tokens_(tokens ? LoadTokens() : nullptr),
        registry_(jobs_.env(), tokens_.get()),
        door_(&registry_, &refusals_, tokens_.get(), kMaxNameBytes) {}

  JobDoor& door() { return door_; }
  JobRegistry& registry() { return registry_; }
  // The memory budget the jobs' collectives reserve from.
  MemoryBudget& memory() { return jobs_.memory(); }
  // The codes of the requests the door refused, in order.
  std::vector<absl::StatusCode> refused() { return refusals_.refused(); }

  // `token` as a call's `authorization: Bearer TOKEN` presents it.
  static PresentedToken Bearer(const std::string& token) {
    const std::string header = absl::StrCat("Bearer ", token);
    return PresentToken(&header);
  }
  static v1::JoinRequest JoinRequest(const std::string& job, int rank,
                                     int world, const std::string& session) {
    return MakeJoinRequest(job, rank, world, session);
  }
  // Joins `session` (a FakeSession unless given) as rank `rank` of job
  // `job` of `world` ranks, presenting no token: the door's answer.
  absl::Status Join(const std::string& job, int rank, int world,
                    const std::string& session,
                    std::shared_ptr<SessionChannel> channel =
                        std::make_shared<FakeSession>()) {
    return door_.Join(JoinRequest(job, rank, world, session), PresentedToken{},
                      std::move(channel));
  }
  // Rank `rank`'s header of a float32 [kFloats] sum all-reduce, the first
  // collective of epoch 1, as attempt `session`/1.
  static v1::CollectiveHeader AllReduce(const std::string& job,
                                        const std::string& session, int rank) {
    v1::CollectiveHeader h;
    h.set_job(job);
    h.set_epoch(1);
    h.set_session_id(session);
    h.set_rank(rank);
    h.set_sequence(0);
    h.set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
    h.set_timeout_ms(10000);
    h.set_attempt_id(absl::StrCat(session, "/1"));
    v1::TensorSpec* tensor = h.add_tensors();
    tensor->set_dtype(v1::DATA_TYPE_FLOAT32);
    tensor->add_shape(kFloats);
    tensor->set_op(v1::REDUCE_OP_SUM);
    return h;
  }

 private:
  // A tokens file under TEST_TMPDIR with kTokenJob's line.
  static std::unique_ptr<JobTokens> LoadTokens() {
    const char* dir = std::getenv("TEST_TMPDIR");
    const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp",
                                          "/job_door_test_env_tokens");
    std::string hex;
    for (uint8_t b : HashToken(kToken)) {
      absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
    }
    std::ofstream(path) << kTokenJob << " " << hex << "\n";
    absl::StatusOr<std::unique_ptr<JobTokens>> tokens = JobTokens::Load(path);
    if (!tokens.ok()) std::abort();  // the file was just written
    return *std::move(tokens);
  }

  JobTestEnv jobs_;
  RefusalRecorder refusals_;
  const std::unique_ptr<JobTokens> tokens_;
  JobRegistry registry_;
  JobDoor door_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_JOBS_JOB_DOOR_TEST_ENV_H_

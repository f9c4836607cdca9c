#include "server/grpc/admin_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/reducer/v1/status_conversion.h"
#include "server/grpc/call_token.h"
#include "server/metrics/metric_labels.h"

namespace reducer {

v1::StatusResponse BuildStatusResponse(JobRegistry* registry,
                                       const MemoryBudget& memory,
                                       const std::string& version,
                                       bool serving) {
  v1::StatusResponse response;
  response.set_version(version);
  response.set_serving(serving);
  response.set_memory_reserved_bytes(memory.used());
  response.set_memory_budget_bytes(memory.limit());
  for (JobSnapshot& job : registry->Snapshot()) {
    v1::JobStatus* out = response.add_jobs();
    out->set_name(job.name);
    out->set_world_size(job.world_size);
    out->set_epoch(job.epoch);
    out->set_state(job.state);
    out->set_end_reason(job.end_reason);
    for (int r : job.joined_ranks) out->add_joined_ranks(r);
    out->set_quorum_mode(job.quorum_mode);
    for (int r : job.absent_ranks) out->add_absent_ranks(r);
    for (int r : job.done_ranks) out->add_done_ranks(r);
    out->set_chunk_bytes(job.chunk_bytes);
    out->set_input_bytes_per_s(job.input_bytes_per_s);
    out->set_relay_bytes_saved(job.relay_bytes_saved);
    std::stable_sort(job.pending.begin(), job.pending.end(),
                     [](const CollectiveSnapshot& a, const CollectiveSnapshot& b) {
                       return a.age > b.age;
                     });
    for (const CollectiveSnapshot& c : job.pending) {
      v1::PendingCollective* p = out->add_pending();
      p->set_name(c.name);
      p->set_kind(std::string(KindLabel(c.kind)));
      for (int r : c.group) p->add_group(r);
      for (int r : c.missing_ranks) p->add_missing_ranks(r);
      p->set_age_seconds(absl::ToDoubleSeconds(c.age));
      p->set_stalled(c.stalled);
    }
  }
  return response;
}

grpc::ServerUnaryReactor* AdminService::Status(
    grpc::CallbackServerContext* context, const v1::StatusRequest* /*request*/,
    v1::StatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  *response = BuildStatusResponse(registry_, *memory_, version_,
                                  serving_->load(std::memory_order_relaxed));
  response->set_upstream(upstream_);
  if (tokens_ == nullptr) {
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  const PresentedToken token = TokenOf(context);
  absl::Status known = tokens_->CheckAnyJob(token);
  if (!known.ok()) {
    response->Clear();
    reactor->Finish(ToGrpcStatus(absl::Status(
        known.code(),
        absl::StrCat("Admin.Status: ", known.message(),
                     "; reducerd lists a job only to the holder of its "
                     "token (pass reducerctl --token or --token_file)"))));
    return reactor;
  }
  // Per-job view: keep the jobs this token is the token of.
  google::protobuf::RepeatedPtrField<v1::JobStatus> all;
  all.Swap(response->mutable_jobs());
  for (v1::JobStatus& job : all) {
    if (tokens_->Check(job.name(), token).ok()) {
      *response->add_jobs() = std::move(job);
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace reducer

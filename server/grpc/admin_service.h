// AdminService: the reducer.v1.Admin gRPC service, what reducerctl asks:
// every job, its ranks and epoch, and each collective not yet done with the
// ranks it still waits for and for how long. With job tokens configured a
// Status call must carry a job's token and sees only the jobs of that
// token: a tenant never learns another job's name or collectives.
//
// Thread-safe; every pointer given to the constructor must outlive it.
#ifndef REDUCER_SERVER_GRPC_ADMIN_SERVICE_H_
#define REDUCER_SERVER_GRPC_ADMIN_SERVICE_H_

#include <atomic>
#include <string>

#include "proto/reducer/v1/admin.grpc.pb.h"
#include "server/engine/memory_budget.h"
#include "server/jobs/job_registry.h"
#include "server/security/job_tokens.h"

namespace reducer {

// The Status answer for the state `registry` and `memory` are in now.
v1::StatusResponse BuildStatusResponse(JobRegistry* registry,
                                       const MemoryBudget& memory,
                                       const std::string& version,
                                       bool serving);

class AdminService final : public v1::Admin::CallbackService {
 public:
  // `serving` is false once the server drains. `tokens` null: no tokens
  // required, every job is listed.
  AdminService(JobRegistry* registry, const MemoryBudget* memory,
               std::string version, const std::atomic<bool>* serving,
               JobTokens* tokens)
      : registry_(registry),
        memory_(memory),
        version_(std::move(version)),
        serving_(serving),
        tokens_(tokens) {}

  // With tokens: UNAUTHENTICATED when the call carries no token or one no
  // job has; otherwise only the jobs whose token it carries are listed.
  // A relay's upstream, for Status (before serving).
  void SetUpstream(std::string upstream) { upstream_ = std::move(upstream); }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::StatusRequest* request,
                                   v1::StatusResponse* response) override;

 private:
  JobRegistry* const registry_;        // not owned
  const MemoryBudget* const memory_;   // not owned
  const std::string version_;
  const std::atomic<bool>* const serving_;  // not owned
  JobTokens* const tokens_;                 // not owned; null: none
  std::string upstream_;                    // SetUpstream; empty: not a relay
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_ADMIN_SERVICE_H_

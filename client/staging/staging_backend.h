// StagingBackend: the CollectiveBackend that lets collectives run on GPU
// memory. It wraps the backend that carries host collectives (the router):
// a contribution on the CPU goes straight through; one on a CUDA device is
// copied to host memory (DeviceStaging::ToHost, after the work queued on
// the caller's stream) and travels as a host collective whose transport
// sends each chunk as soon as its copy is done (the staged inputs' gate,
// client/internal/input_gate.h), and its results are copied into new
// allocations on the input's device before Wait() returns them. The
// transports below never see device memory.
//
//   StagingBackend staging(router.get(), device_staging.get());
//   std::unique_ptr<CollectiveAttempt> attempt = staging.Start(contribution);
//   absl::StatusOr<std::vector<Tensor>> on_gpu = attempt->Wait();
//
// Thread-safe (holds no mutable state).
#ifndef REDUCER_CLIENT_STAGING_STAGING_BACKEND_H_
#define REDUCER_CLIENT_STAGING_STAGING_BACKEND_H_

#include <memory>

#include "client/internal/collective_attempt.h"
#include "client/internal/collective_backend.h"
#include "client/staging/device_staging.h"

namespace reducer {

class StagingBackend final : public CollectiveBackend {
 public:
  // `host` and `staging` must outlive this and every attempt it starts.
  StagingBackend(CollectiveBackend* host, DeviceStaging* staging)
      : host_(host), staging_(staging) {}

  // CollectiveBackend::Start. For a device contribution the attempt's Wait()
  // also returns ToHost's and ToDevice's errors (INTERNAL naming the CUDA
  // call); a failed ToHost sends nothing.
  std::unique_ptr<CollectiveAttempt> Start(
      const Contribution& contribution) override;

 private:
  CollectiveBackend* const host_;   // not owned
  DeviceStaging* const staging_;    // not owned
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_STAGING_BACKEND_H_

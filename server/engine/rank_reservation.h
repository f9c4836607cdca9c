// RankReservation: the bytes one rank of a collective holds in the memory
// budget and, where they have one, its job's and its tenant's shares, given back when the last
// owner lets go. The owners are the Collective, for as long as it needs
// them (until the rank is finished and nothing of it is staged), and every
// message of the rank's answer (ResultMessage::hold) until its channel
// wrote it to the client (gRPC: the write completed; same-host: the
// response is in the ring) or dropped it. So answers a client has not read
// stay counted in the budget, and a client that stops reading holds budget,
// not memory nobody counts.
//
//   // `bytes` already reserved in `memory`, `job_memory`, `tenant_memory`:
//   auto held = std::make_shared<RankReservation>(memory, job_memory,
//                                                 tenant_memory, bytes);
//   message.hold = held;  // each message of the rank's answer
//   held.reset();         // the Collective is done with it
//
// Thread-safe: the budgets are atomic, and nothing else changes.
#ifndef REDUCER_SERVER_ENGINE_RANK_RESERVATION_H_
#define REDUCER_SERVER_ENGINE_RANK_RESERVATION_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "server/engine/memory_budget.h"

namespace reducer {

class RankReservation {
 public:
  // Takes over `bytes` already reserved in `memory` (which must outlive
  // every owner) and, unless null, in `job_memory` and `tenant_memory`.
  RankReservation(MemoryBudget* memory,
                  std::shared_ptr<MemoryBudget> job_memory,
                  std::shared_ptr<MemoryBudget> tenant_memory, size_t bytes)
      : memory_(memory),
        job_memory_(std::move(job_memory)),
        tenant_memory_(std::move(tenant_memory)),
        bytes_(bytes) {}
  ~RankReservation() {
    memory_->Release(bytes_);
    if (job_memory_ != nullptr) job_memory_->Release(bytes_);
    if (tenant_memory_ != nullptr) tenant_memory_->Release(bytes_);
  }
  RankReservation(const RankReservation&) = delete;
  RankReservation& operator=(const RankReservation&) = delete;

  size_t bytes() const { return bytes_; }

 private:
  MemoryBudget* const memory_;
  const std::shared_ptr<MemoryBudget> job_memory_;
  const std::shared_ptr<MemoryBudget> tenant_memory_;
  const size_t bytes_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_RANK_RESERVATION_H_

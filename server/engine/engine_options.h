// EngineOptions: the tunables and limits of the collective engine and of the
// jobs built on it (server/jobs reads them through CollectiveEnv). A plain
// value type; reducerd fills it from its flags (server/server.cc), tests set
// what they need on the defaults.
//
//   EngineOptions options;
//   options.chunk_bytes = 64;
//   CollectiveEnv env{&options, &pool, &timers, &memory, &chunks, ...};
#ifndef REDUCER_SERVER_ENGINE_ENGINE_OPTIONS_H_
#define REDUCER_SERVER_ENGINE_ENGINE_OPTIONS_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "server/engine/chunk_pacing.h"

namespace reducer {

struct EngineOptions {
  // The unit of staging and reduction: results are answered in chunks of
  // this many bytes (a multiple of 8), or less where a job paces them.
  size_t chunk_bytes = 1 << 20;
  // A job's paced kinds (KindUsesPacedChunks) use about this much time of
  // payload per chunk at the pace its earlier inputs arrived
  // (server/engine/chunk_pacing.h); zero: always chunk_bytes.
  absl::Duration chunk_time = kDefaultChunkTime;
  // Chunks a rank may have staged or queued before its call stops reading:
  // memory per collective stays within 2 x ranks x window x chunk.
  int window = 4;
  // Reductions of chunks at least this large run on the reduction pool
  // rather than on the thread that delivered the last part.
  size_t offload_bytes = 64 << 10;
  // The most of the memory budget one job's collectives may hold (1: no
  // share of its own).
  double max_job_memory_fraction = 0.5;
  // The most of the memory budget one tenant's jobs may hold together
  // (server/jobs/tenants.h; 1: no share of its own).
  double max_tenant_memory_fraction = 0.5;

  // Limits of the jobs layer: over any of them a request is refused.
  absl::Duration max_collective_timeout = absl::Minutes(30);
  size_t max_tensor_bytes = size_t{4} << 30;  // one contribution's payload
  int max_jobs = 1024;
  int max_jobs_per_tenant = 256;
  int max_world_size = 16384;
  int max_pending_collectives_per_job = 1024;
  int max_pending_collectives_per_tenant = 4096;

  // How a RESOURCE_EXHAUSTED message names the settings behind the memory
  // budget and a job's and a tenant's share of it, so that its reader knows
  // what to raise (reducerd's flags).
  std::string memory_budget_setting = "--memory_budget_bytes";
  std::string job_memory_fraction_setting = "--max_job_memory_fraction";
  std::string tenant_memory_fraction_setting = "--max_tenant_memory_fraction";
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_ENGINE_OPTIONS_H_

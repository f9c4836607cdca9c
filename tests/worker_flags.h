// The command-line flags every rank process of the process tests shares
// (tests/e2e_worker, tests/fault_worker, tests/conformance_worker): which
// reducerd, job and rank it is, and its client's timeout.
//
//   int main(int argc, char** argv) {
//     const reducer::ClientOptions options =
//         reducer::testing::ParseWorkerFlags(argc, argv,
//                                            /*default_timeout_s=*/30);
//     ...
//
//   --target      reducerd's address (default 127.0.0.1:50051)
//   --job         the job's name, the same on every rank (no default)
//   --rank        this process's rank (default 0)
//   --world_size  ranks in the job (default 1)
//   --timeout_s   ClientOptions::timeout in seconds: Connect and every call
//                 that sets none (default: the worker's, given to
//                 ParseWorkerFlags)
//
// Each worker defines its own further flags (--scenario, --steps, ...) and
// checks what it needs of these (a job name, a rank in range) itself.
// Call ParseWorkerFlags once, from main, before reading any flag.
#ifndef REDUCER_TESTS_WORKER_FLAGS_H_
#define REDUCER_TESTS_WORKER_FLAGS_H_

#include "client/client_options.h"

namespace reducer::testing {

// Parses the command line (absl::ParseCommandLine), with --timeout_s
// defaulting to `default_timeout_s` where the command line does not set it;
// returns WorkerClientOptions() of the parsed flags.
ClientOptions ParseWorkerFlags(int argc, char** argv, int default_timeout_s);

// ClientOptions with target, job, rank, world_size and timeout from the
// flags; everything else as ClientOptions' defaults.
ClientOptions WorkerClientOptions();

}  // namespace reducer::testing

#endif  // REDUCER_TESTS_WORKER_FLAGS_H_

// The flags with which every example worker finds its job, the
// ClientOptions they make, and the examples' main():
//
//   --target      reducerd's address (default 127.0.0.1:50051)
//   --job         the job's name, the same on every rank (default: the
//                 example's own, given to ParseExampleFlags or ExampleMain)
//   --rank        this process's rank (default 0)
//   --world_size  ranks in the job (default 1)
//   --tls_ca_file, --tls_cert_file, --tls_key_file, --tls_server_name
//                 TLS to reducerd as reducerctl's flags of the same names
//                 (docs/security.md); without --tls_ca_file, plaintext
//
//   absl::Status Run(const reducer::ClientOptions& options) {
//     absl::StatusOr<std::unique_ptr<reducer::Client>> client =
//         reducer::Client::Connect(options);
//     ...
//   }
//
//   int main(int argc, char** argv) {
//     return reducer::examples::ExampleMain(argc, argv, "allreduce-example",
//                                           Run);
//   }
//
// Each example defines its own further flags (--steps, ...).
#ifndef REDUCER_EXAMPLES_EXAMPLE_FLAGS_H_
#define REDUCER_EXAMPLES_EXAMPLE_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "client/client_options.h"

namespace reducer::examples {

// Parses the command line (absl::ParseCommandLine), with --job defaulting
// to `default_job` where the command line does not set it. Call once, from
// main, before reading any flag.
void ParseExampleFlags(int argc, char** argv, const std::string& default_job);

// ClientOptions with target, job, rank, world_size and (with
// --tls_ca_file) tls from the flags; everything else as ClientOptions'
// defaults.
ClientOptions ExampleClientOptions();

// An example's whole main(): ParseExampleFlags, then
// run(ExampleClientOptions()). Returns main's exit status: 0 when run
// succeeds; else 1, after printing "<program> rank <rank>: <status>" on
// stderr (<program>: argv[0]'s file name).
int ExampleMain(int argc, char** argv, const std::string& default_job,
                absl::Status (*run)(const ClientOptions& options));

}  // namespace reducer::examples

#endif  // REDUCER_EXAMPLES_EXAMPLE_FLAGS_H_

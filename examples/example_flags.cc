#include "examples/example_flags.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "",
          "job name, same on every rank (default: the example's own)");
ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(int, world_size, 1, "number of ranks");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM file of the CA that signed reducerd's certificate; empty: "
          "plaintext (the other --tls_ flags need it)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "this worker's PEM certificate, for mutual TLS (with "
          "--tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "the key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "the name to check in reducerd's certificate; empty: the "
          "target's host");

namespace reducer::examples {

void ParseExampleFlags(int argc, char** argv, const std::string& default_job) {
  // Set before parsing, so that a --job given wins.
  absl::SetFlag(&FLAGS_job, default_job);
  absl::ParseCommandLine(argc, argv);
}

ClientOptions ExampleClientOptions() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  if (!absl::GetFlag(FLAGS_tls_ca_file).empty()) {
    TlsOptions tls;
    tls.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
    tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
    tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
    tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
    options.tls = std::move(tls);
  }
  return options;
}

int ExampleMain(int argc, char** argv, const std::string& default_job,
                absl::Status (*run)(const ClientOptions& options)) {
  ParseExampleFlags(argc, argv, default_job);
  const absl::Status status = run(ExampleClientOptions());
  if (status.ok()) return 0;
  absl::string_view program = argv[0];
  program.remove_prefix(program.rfind('/') + 1);  // npos + 1 == 0
  absl::FPrintF(stderr, "%s rank %d: %s\n", program, absl::GetFlag(FLAGS_rank),
                status.ToString());
  return 1;
}

}  // namespace reducer::examples

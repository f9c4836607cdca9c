// reducerctl: the operator's command line for a running reducerd.
//
//   reducerctl [--target=127.0.0.1:50051] status    jobs, ranks, epochs, and
//                                                   every collective not yet
//                                                   done with the ranks it
//                                                   waits for and how long
//   reducerctl [--target=...] health                grpc.health.v1 status;
//                                                   exit 0 only when SERVING
//   reducerctl [--target=...] services              the services reducerd
//                                                   lists through gRPC
//                                                   server reflection
//   reducerctl --version                            prints "reducerctl VERSION"
//
// TLS and tokens as for workers (docs/security.md):
// --tls_ca_file (with --tls_cert_file/--tls_key_file for mutual TLS,
// --tls_server_name to check another name), and --token or --token_file
// (the file's contents, surrounding whitespace trimmed) when reducerd runs
// with --job_tokens_file: status then lists only that token's jobs.
//
// Exit codes: 0 success, 1 the call failed or reducerd is not serving (the
// message names the target and the status), 2 a usage error.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "client/security/channel_security.h"
#include "client/security/tls_diagnosis.h"
#include "client/security/token_file.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/admin.grpc.pb.h"
#include "server/version.h"
#include "tools/proto/health.grpc.pb.h"
#include "tools/proto/reflection.grpc.pb.h"
#include "tools/status_format.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd's address");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "deadline of each call");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM roots that sign reducerd's certificate; set: TLS, empty: "
          "plaintext");
ABSL_FLAG(std::string, tls_cert_file, "",
          "this client's PEM certificate, for mutual TLS (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "the key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check in reducerd's certificate; empty: the target's host");
ABSL_FLAG(std::string, token, "",
          "a job's bearer token (reducerd with --job_tokens_file); status "
          "then lists that job only");
ABSL_FLAG(std::string, token_file, "",
          "file holding the token (whitespace around it trimmed); instead of "
          "--token, which other users can see in the process list");

namespace reducer {
namespace {

// The TLS settings the flags give; unset: plaintext.
std::optional<TlsOptions> TlsFromFlags() {
  if (absl::GetFlag(FLAGS_tls_ca_file).empty()) return std::nullopt;
  TlsOptions tls;
  tls.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  return tls;
}

// `message` of the client library, with its ClientOptions fields named as
// reducerctl's flags.
std::string InFlagWords(absl::string_view message) {
  return absl::StrReplaceAll(
      message, {{"ClientOptions::tls is unset", "no --tls_ca_file given"},
                {"ClientOptions::tls is set; unset tls",
                 "--tls_ca_file is given; drop the --tls_ flags"},
                {"ClientOptions::tls.", "--tls_"},
                {"ClientOptions::tls", "--tls_ca_file"},
                {"tls.ca_file", "--tls_ca_file"},
                {"tls.cert_file", "--tls_cert_file"},
                {"tls.key_file", "--tls_key_file"},
                {"tls.server_name", "--tls_server_name"}});
}

// A call failed: says so, naming the target and the status. A failure to
// connect is probed for a TLS mismatch, named when found.
int Fail(const std::string& what, const grpc::Status& status) {
  const std::string target = absl::GetFlag(FLAGS_target);
  std::string cause;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    absl::Status tls = DiagnoseTls(target, TlsFromFlags(), absl::Seconds(2));
    if (!tls.ok()) cause = absl::StrCat("; ", InFlagWords(tls.message()));
  }
  std::fprintf(stderr, "reducerctl: %s at %s failed: %s: %s%s\n", what.c_str(),
               target.c_str(),
               absl::StatusCodeToString(
                   static_cast<absl::StatusCode>(status.error_code()))
                   .c_str(),
               status.error_message().c_str(), cause.c_str());
  return 1;
}

// The channel the flags describe; INVALID_ARGUMENT naming the flag for a
// TLS file or token file that cannot be used.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelFromFlags() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.tls = TlsFromFlags();
  if (!options.tls.has_value() &&
      !(absl::GetFlag(FLAGS_tls_cert_file).empty() &&
        absl::GetFlag(FLAGS_tls_key_file).empty() &&
        absl::GetFlag(FLAGS_tls_server_name).empty())) {
    return absl::InvalidArgumentError(
        "--tls_cert_file, --tls_key_file and --tls_server_name need "
        "--tls_ca_file (the CA that signed reducerd's certificate)");
  }
  options.token = absl::GetFlag(FLAGS_token);
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    if (!options.token.empty()) {
      return absl::InvalidArgumentError("give --token or --token_file, not both");
    }
    absl::StatusOr<std::string> token =
        ReadTokenFile("--token_file", token_file);
    if (!token.ok()) return token.status();
    options.token = *std::move(token);
  }
  absl::StatusOr<ChannelSecurity> security = ChannelSecurity::Create(options);
  if (!security.ok()) {
    return absl::InvalidArgumentError(InFlagWords(security.status().message()));
  }
  return security->NewChannel(options.target, grpc::ChannelArguments());
}

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_timeout)));
}

int Status(const std::shared_ptr<grpc::Channel>& channel) {
  std::unique_ptr<v1::Admin::Stub> stub = v1::Admin::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::StatusResponse response;
  grpc::Status status = stub->Status(&context, v1::StatusRequest(), &response);
  if (!status.ok()) return Fail("Admin.Status", status);
  std::fputs(FormatStatus(response).c_str(), stdout);
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel) {
  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(
      &context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) return Fail("grpc.health.v1.Health/Check", status);
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  std::printf("%s\n", name.c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

int Services(const std::shared_ptr<grpc::Channel>& channel) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  std::unique_ptr<ServerReflection::Stub> stub =
      ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub->ServerReflectionInfo(&context);
  ServerReflectionRequest request;
  request.set_list_services("");
  ServerReflectionResponse response;
  const bool exchanged = stream->Write(request) && stream->WritesDone() &&
                         stream->Read(&response);
  grpc::Status status = stream->Finish();
  if (!status.ok()) return Fail("server reflection", status);
  if (!exchanged || !response.has_list_services_response()) {
    std::fprintf(stderr, "reducerctl: server reflection at %s gave no list%s\n",
                 absl::GetFlag(FLAGS_target).c_str(),
                 response.has_error_response()
                     ? absl::StrCat(": ", response.error_response().error_message())
                           .c_str()
                     : "");
    return 1;
  }
  for (const auto& service : response.list_services_response().service()) {
    std::printf("%s\n", service.name().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace reducer

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reducerctl: inspect a running reducerd.\n"
      "Usage: reducerctl [--target=HOST:PORT] [--timeout=5s] "
      "[--tls_ca_file=F [--tls_cert_file=F --tls_key_file=F] "
      "[--tls_server_name=N]] [--token=T | --token_file=F] "
      "status|health|services");
  // --version (Abseil's own flag) prints "reducerctl VERSION" and exits 0.
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] {
    return absl::StrCat("reducerctl ", reducer::kReducerVersion, "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "reducerctl: expected one command (status, health or "
                 "services), got %zu; see --help\n",
                 args.size() - 1);
    return 2;
  }
  const std::string command = args[1];
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      reducer::ChannelFromFlags();
  if (!channel.ok()) {
    std::fprintf(stderr, "reducerctl: cannot reach %s: %s\n",
                 absl::GetFlag(FLAGS_target).c_str(),
                 std::string(channel.status().message()).c_str());
    return 2;
  }
  if (command == "status") return reducer::Status(*channel);
  if (command == "health") return reducer::Health(*channel);
  if (command == "services") return reducer::Services(*channel);
  std::fprintf(stderr,
               "reducerctl: unknown command '%s' (status, health or services)\n",
               command.c_str());
  return 2;
}

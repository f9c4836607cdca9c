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
//
// Exit codes: 0 success, 1 the call failed or reducerd is not serving (the
// message names the target and the status), 2 a usage error.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/admin.grpc.pb.h"
#include "tools/proto/health.grpc.pb.h"
#include "tools/proto/reflection.grpc.pb.h"
#include "tools/status_format.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd's address");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "deadline of each call");

namespace reducer {
namespace {

int Fail(const std::string& what, const grpc::Status& status) {
  std::fprintf(stderr, "reducerctl: %s at %s failed: %s: %s\n", what.c_str(),
               absl::GetFlag(FLAGS_target).c_str(),
               absl::StatusCodeToString(
                   static_cast<absl::StatusCode>(status.error_code()))
                   .c_str(),
               status.error_message().c_str());
  return 1;
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
      "status|health|services");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "reducerctl: expected one command (status, health or "
                 "services), got %zu; see --help\n",
                 args.size() - 1);
    return 2;
  }
  const std::string command = args[1];
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials());
  if (command == "status") return reducer::Status(channel);
  if (command == "health") return reducer::Health(channel);
  if (command == "services") return reducer::Services(channel);
  std::fprintf(stderr,
               "reducerctl: unknown command '%s' (status, health or services)\n",
               command.c_str());
  return 2;
}

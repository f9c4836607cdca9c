#include "server/metrics/grpc_server_metrics.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

constexpr char kLabels[] =
    "grpc_method=\"Check\",grpc_service=\"grpc.health.v1.Health\","
    "grpc_type=\"unary\"";

std::string Text(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

std::vector<GrpcMethod> HealthMethods() {
  return {{"grpc.health.v1.Health", "Check", false, false},
          {"grpc.health.v1.Health", "Watch", false, true}};
}

// One health Check through a real in-process server whose interceptors
// count into `metrics` (skipping `skip`); the status it ended with.
grpc::Status CheckHealth(GrpcServerMetrics& metrics,
                         std::vector<std::string> skip) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      factories;
  factories.push_back(metrics.MakeInterceptorFactory(std::move(skip)));
  builder.experimental().SetInterceptorCreators(std::move(factories));
  // gRPC serves the health service only next to a service of the
  // application's; this one is never called.
  grpc::CallbackGenericService unused;
  builder.RegisterCallbackGenericService(&unused);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  grpc::GenericStub stub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  grpc::Slice empty;  // an empty HealthCheckRequest: the whole server
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  server->Shutdown();
  return status;
}

TEST(GrpcServerMetricsTest, EverySeriesExistsAtZeroFromTheStart) {
  prometheus::Registry registry;
  GrpcServerMetrics metrics(&registry, HealthMethods());
  const std::string text = Text(registry);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_started_total{", kLabels, "} 0\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_handled_total{grpc_code=\"Unauthenticated\",", kLabels, "} 0\n")));
  EXPECT_THAT(text, HasSubstr("grpc_type=\"server_stream\""));
}

TEST(GrpcServerMetricsTest, InterceptorCountsACallbackServerCall) {
  prometheus::Registry registry;
  GrpcServerMetrics metrics(&registry, HealthMethods());
  ASSERT_TRUE(CheckHealth(metrics, {}).ok());
  const std::string text = Text(registry);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_started_total{", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_handled_total{grpc_code=\"OK\",", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_msg_received_total{", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_msg_sent_total{", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_handling_seconds_count{", kLabels, "} 1\n")));
}

TEST(GrpcServerMetricsTest, InterceptorSkipsServicesCountedByTheirReactors) {
  prometheus::Registry registry;
  GrpcServerMetrics metrics(&registry, HealthMethods());
  ASSERT_TRUE(CheckHealth(metrics, {"grpc.health.v1.Health"}).ok());
  EXPECT_THAT(Text(registry),
              HasSubstr(absl::StrCat("grpc_server_started_total{", kLabels, "} 0\n")));
}

TEST(GrpcServerMetricsTest, CallMetricsCountsWhatTheReactorReports) {
  prometheus::Registry registry;
  GrpcServerMetrics metrics(&registry, HealthMethods());
  ASSERT_EQ(metrics.Find("/grpc.health.v1.Health/Nope"), nullptr);
  {
    CallMetrics call(metrics.Find("/grpc.health.v1.Health/Check"));
    call.Received();
    call.Sent();
    call.Sent();
    call.Handled(grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  CallMetrics off;  // metrics off: counts nothing, and does not crash
  off.Received();
  off.Handled(grpc::StatusCode::OK);
  const std::string text = Text(registry);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_started_total{", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_msg_sent_total{", kLabels, "} 2\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_handled_total{grpc_code=\"DeadlineExceeded\",", kLabels, "} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("grpc_server_handled_total{grpc_code=\"OK\",", kLabels, "} 0\n")));
}

TEST(GrpcServerMetricsTest, MethodsOfServicesReadsTheDescriptors) {
  // No service of that name is linked into this test.
  EXPECT_TRUE(MethodsOfServices({"no.such.Service"}).empty());
}

}  // namespace
}  // namespace reducer

#include "server/metrics/grpc_server_metrics.h"

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "prometheus/family.h"
#include "server/metrics/metric_families.h"

namespace reducer {
namespace {

// go-grpc-prometheus's default buckets (prometheus.DefBuckets).
const prometheus::Histogram::BucketBoundaries& HandlingBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *kBuckets;
}

const char* TypeLabel(const GrpcMethod& m) {
  if (m.client_streaming && m.server_streaming) return "bidi_stream";
  if (m.client_streaming) return "client_stream";
  if (m.server_streaming) return "server_stream";
  return "unary";
}

}  // namespace

std::vector<GrpcMethod> MethodsOfServices(
    const std::vector<std::string>& full_service_names) {
  std::vector<GrpcMethod> out;
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : full_service_names) {
    const google::protobuf::ServiceDescriptor* service =
        pool->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = service->method(i);
      out.push_back(GrpcMethod{name, m->name(), m->client_streaming(),
                               m->server_streaming()});
    }
  }
  return out;
}

// Counts one call. Created per call by the factory; gRPC owns and deletes
// it when the call ends. Hooks of one call run one at a time.
class GrpcServerMetrics::Interceptor final
    : public grpc::experimental::Interceptor {
 public:
  explicit Interceptor(const MethodMetrics* metrics)
      : metrics_(metrics), start_(std::chrono::steady_clock::now()) {
    metrics_->started->Increment();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() != nullptr) {
      metrics_->msg_received->Increment();
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      metrics_->msg_sent->Increment();
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const int code = static_cast<int>(methods->GetSendStatus().error_code());
      const int index = code >= 0 && code < kNumStatusCodes
                            ? code
                            : static_cast<int>(absl::StatusCode::kUnknown);
      metrics_->handled[index]->Increment();
      metrics_->handling_seconds->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        start_)
              .count());
    }
    methods->Proceed();
  }

 private:
  const MethodMetrics* const metrics_;  // owned by GrpcServerMetrics
  const std::chrono::steady_clock::time_point start_;
};

class GrpcServerMetrics::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  Factory(const GrpcServerMetrics* owner, std::vector<std::string> skip_prefixes)
      : owner_(owner), skip_prefixes_(std::move(skip_prefixes)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* path = info->method();
    if (path == nullptr) return nullptr;
    for (const std::string& prefix : skip_prefixes_) {
      if (absl::StartsWith(path, prefix)) return nullptr;
    }
    const MethodMetrics* metrics = owner_->Find(path);
    return metrics == nullptr ? nullptr : new Interceptor(metrics);
  }

 private:
  const GrpcServerMetrics* const owner_;  // outlives the gRPC server
  const std::vector<std::string> skip_prefixes_;  // "/reducer.v1.Reducer/"
};

GrpcServerMetrics::GrpcServerMetrics(prometheus::Registry* registry,
                                     const std::vector<GrpcMethod>& methods) {
  auto& started = CounterFamily(*registry, "grpc_server_started_total",
                                "Total number of RPCs started on the server.");
  auto& handled = CounterFamily(*registry, "grpc_server_handled_total",
                                "Total number of RPCs completed on the server, "
                                "regardless of success or failure.");
  auto& received =
      CounterFamily(*registry, "grpc_server_msg_received_total",
                    "Total number of RPC stream messages received on "
                    "the server.");
  auto& sent = CounterFamily(*registry, "grpc_server_msg_sent_total",
                             "Total number of gRPC stream messages sent by the "
                             "server.");
  auto& seconds =
      HistogramFamily(*registry, "grpc_server_handling_seconds",
                      "Histogram of response latency (seconds) of gRPC "
                      "that had been application-level handled by the "
                      "server.");
  for (const GrpcMethod& m : methods) {
    const prometheus::Labels labels{{"grpc_service", m.service},
                                    {"grpc_method", m.method},
                                    {"grpc_type", TypeLabel(m)}};
    MethodMetrics mm;
    mm.started = &started.Add(labels);
    mm.msg_received = &received.Add(labels);
    mm.msg_sent = &sent.Add(labels);
    mm.handling_seconds = &seconds.Add(labels, HandlingBuckets());
    for (int c = 0; c < kNumStatusCodes; ++c) {
      prometheus::Labels with_code = labels;
      with_code["grpc_code"] =
          std::string(StatusCodeLabel(static_cast<absl::StatusCode>(c)));
      mm.handled[c] = &handled.Add(with_code);
    }
    by_path_[absl::StrCat("/", m.service, "/", m.method)] = mm;
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcServerMetrics::MakeInterceptorFactory(std::vector<std::string> skip_services) {
  std::vector<std::string> prefixes;
  for (const std::string& s : skip_services) {
    prefixes.push_back(absl::StrCat("/", s, "/"));
  }
  return std::make_unique<Factory>(this, std::move(prefixes));
}

const GrpcServerMetrics::MethodMetrics* GrpcServerMetrics::Find(
    absl::string_view path) const {
  auto it = by_path_.find(path);
  return it == by_path_.end() ? nullptr : &it->second;
}

namespace {

void CountHandled(const GrpcServerMetrics::MethodMetrics& m, int code,
                  std::chrono::steady_clock::time_point start) {
  const int index = code >= 0 && code < kNumStatusCodes
                        ? code
                        : static_cast<int>(absl::StatusCode::kUnknown);
  m.handled[index]->Increment();
  m.handling_seconds->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
}

}  // namespace

CallMetrics::CallMetrics(const GrpcServerMetrics::MethodMetrics* metrics)
    : metrics_(metrics), start_(std::chrono::steady_clock::now()) {
  if (metrics_ != nullptr) metrics_->started->Increment();
}

void CallMetrics::Handled(grpc::StatusCode code) const {
  if (metrics_ != nullptr) CountHandled(*metrics_, static_cast<int>(code), start_);
}

}  // namespace reducer

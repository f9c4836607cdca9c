// GrpcServerMetrics: gRPC server metrics under go-grpc-prometheus's names,
// counted by a server interceptor, so that dashboards made for Go services
// work unchanged:
//
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}
//   grpc_server_msg_received_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_msg_sent_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type} (histogram)
//
// grpc_type is unary, client_stream, server_stream or bidi_stream. Only the
// methods given at construction are counted (each series exists from the
// start, at 0, as go-grpc-prometheus pre-registers them); calls to any other
// path are not, so no label value comes from a client.
//
// Two ways to count a call. The interceptor serves any service, but gRPC
// 1.51 runs every completed operation of an intercepted call through an
// extra empty batch (ContinueFinalizeResultAfterInterception), which cost
// the hot path a fifth of its time; so the Reducer service's reactors count
// their own calls through CallMetrics, and the interceptor skips them.
//
//   GrpcServerMetrics grpc_metrics(&registry, methods);
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(grpc_metrics.MakeInterceptorFactory());
//   builder.experimental().SetInterceptorCreators(std::move(f));
//
// Thread-safe; must outlive the gRPC server its interceptors serve.
#ifndef REDUCER_SERVER_METRICS_GRPC_SERVER_METRICS_H_
#define REDUCER_SERVER_METRICS_GRPC_SERVER_METRICS_H_

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/metric_labels.h"

namespace reducer {

// One method a server serves.
struct GrpcMethod {
  std::string service;  // "reducer.v1.Reducer"
  std::string method;   // "Collective"
  bool client_streaming = false;
  bool server_streaming = false;
};

// The methods of the services named, from the protobuf descriptors linked
// into the binary (a service not found there is skipped).
std::vector<GrpcMethod> MethodsOfServices(
    const std::vector<std::string>& full_service_names);

class GrpcServerMetrics {
 public:
  // Registers the families in `registry` (which must outlive this object)
  // with a series per method of `methods`.
  GrpcServerMetrics(prometheus::Registry* registry,
                    const std::vector<GrpcMethod>& methods);
  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  // A factory whose interceptors count into this object, for every method
  // but those of `skip_services` (counted by their reactors).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  MakeInterceptorFactory(std::vector<std::string> skip_services);

  // The series of one method.
  struct MethodMetrics {
    prometheus::Counter* started;
    prometheus::Counter* msg_received;
    prometheus::Counter* msg_sent;
    prometheus::Histogram* handling_seconds;
    std::array<prometheus::Counter*, kNumStatusCodes> handled;
  };

  // The series of `path` ("/reducer.v1.Reducer/Collective"), or null for a
  // method not given at construction.
  const MethodMetrics* Find(absl::string_view path) const;

 private:
  class Interceptor;
  class Factory;

  // Constant after construction.
  absl::flat_hash_map<std::string, MethodMetrics> by_path_;
};

// What a reactor counts for its own call. Default-constructed (metrics off,
// or a method not counted) it counts nothing, at the cost of a branch.
// Not thread-safe by itself: the counters are, and its fields are constant
// once the reactor starts.
class CallMetrics {
 public:
  CallMetrics() = default;
  // Counts the call as started now; `metrics` (may be null) must outlive
  // the call.
  explicit CallMetrics(const GrpcServerMetrics::MethodMetrics* metrics);

  void Received() const {
    if (metrics_ != nullptr) metrics_->msg_received->Increment();
  }
  void Sent() const {
    if (metrics_ != nullptr) metrics_->msg_sent->Increment();
  }
  // The call ends with `code`: counts it as handled, with its duration.
  void Handled(grpc::StatusCode code) const;

 private:
  const GrpcServerMetrics::MethodMetrics* metrics_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_METRICS_GRPC_SERVER_METRICS_H_

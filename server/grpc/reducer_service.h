// ReducerService: the reducer.v1.Reducer gRPC service. Join and Leave are
// typed callback methods; Collective and Collectives are raw (ByteBuffer)
// callback methods so that tensor bytes skip protobuf's string copies.
//
// Thread-safe; every pointer given to the constructor must outlive it.
#ifndef REDUCER_SERVER_GRPC_REDUCER_SERVICE_H_
#define REDUCER_SERVER_GRPC_REDUCER_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "server/engine/timer_queue.h"
#include "server/grpc/collective_reactor.h"
#include "server/grpc/held_reads.h"
#include "server/grpc/idle_streams.h"
#include "server/jobs/job_door.h"
#include "server/jobs/stream_shares.h"
#include "server/metrics/grpc_server_metrics.h"
#include "server/metrics/metrics_sink.h"

namespace reducer {

class ReducerService final
    : public v1::Reducer::WithRawCallbackMethod_Collective<
          v1::Reducer::WithRawCallbackMethod_Collectives<
              v1::Reducer::WithCallbackMethod_Join<
                  v1::Reducer::WithCallbackMethod_Leave<
                      v1::Reducer::Service>>>> {
 public:
  // Every call enters its job through `door`. At most
  // `max_concurrent_calls` Collective and Collectives streams are served at
  // once; more are answered RESOURCE_EXHAUSTED, and so is a stream that
  // would make a tenant hold more than `max_streams_per_tenant` of them
  // (StreamShares: a stream is its token's tenant's from the moment it
  // opens, and counts for the tenant of each job whose call attaches on
  // it), or, without tokens, one that would make its peer hold more than
  // `max_streams_per_tenant` streams that have sent no call yet. `metrics`
  // counts the calls refused; `grpc_metrics` (null: metrics off) this service's calls, which
  // its reactors count themselves. When the door requires tokens, Join,
  // Leave and every collective must carry the job's token
  // (`authorization: Bearer TOKEN`), or get JobTokens::Check's error. A
  // collective stream whose first message has not come `header_timeout`
  // (when positive) after it opened is ended DEADLINE_EXCEEDED (on
  // `timers`), so silent streams give their slots back; one on which
  // nothing happened for `stream_idle_timeout` (when positive) is ended
  // UNAVAILABLE (IdleStreams). Join streams are never closed for either. A
  // Collectives stream reads nothing while its answers not yet written
  // exceed `max_unread_answer_bytes` (CollectivesReactor).
  ReducerService(JobDoor* door, int max_concurrent_calls,
                 int max_streams_per_tenant, absl::Duration header_timeout,
                 absl::Duration stream_idle_timeout, TimerQueue* timers,
                 MetricsSink* metrics, const GrpcServerMetrics* grpc_metrics,
                 size_t max_unread_answer_bytes);

  grpc::ServerWriteReactor<v1::JoinEvent>* Join(
      grpc::CallbackServerContext* context,
      const v1::JoinRequest* request) override;

  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Collective(
      grpc::CallbackServerContext* context) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Collectives(
      grpc::CallbackServerContext* context) override;

 private:
  // Counts a new stream; the error to refuse it with when over the limit.
  absl::Status Admit();
  // Admits a stream and starts a `Stream` (CollectiveReactor or
  // CollectivesReactor) on it, or refuses it with RESOURCE_EXHAUSTED.
  // `extra` goes to Stream::Create after its common arguments.
  template <typename Stream, typename... Extra>
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartStream(
      grpc::CallbackServerContext* context,
      const GrpcServerMetrics::MethodMetrics* method_metrics, Extra... extra);

  JobDoor* const door_;  // not owned
  const int max_concurrent_calls_;
  StreamShares tenant_shares_;  // by tenant
  // By peer, without tokens, until a call attaches on the stream.
  StreamShares silent_peer_shares_;
  const absl::Duration header_timeout_;
  TimerQueue* const timers_;  // not owned
  MetricsSink* const metrics_;  // not owned
  // Each method's gRPC series; null when metrics are off. Not owned.
  const GrpcServerMetrics::MethodMetrics* const join_metrics_;
  const GrpcServerMetrics::MethodMetrics* const leave_metrics_;
  const GrpcServerMetrics::MethodMetrics* const collective_metrics_;
  const GrpcServerMetrics::MethodMetrics* const collectives_metrics_;
  // Per Collectives stream: the answers not yet written past which it stops
  // reading.
  const size_t max_unread_answer_bytes_;
  // The deadline on the reads Collectives streams hold back (held_reads.h):
  // a few small calls' time, so that ranks starting named collectives in
  // different orders meet a few ms later rather than never.
  static constexpr absl::Duration kReadHoldDeadline = absl::Milliseconds(2);
  HeldReads held_reads_{kReadHoldDeadline};
  IdleStreams idle_streams_;
  // Collective and Collectives streams not yet done. Atomic rather than under a lock: it is
  // touched once at the start and once at the end of every call, alone.
  std::atomic<int> active_calls_{0};
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_REDUCER_SERVICE_H_

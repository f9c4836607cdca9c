// CollectiveCall: one attempt on its own Collective stream (the way payloads
// of more than one message travel). Sends this rank's header and packed
// payload in chunks straight from caller memory (static slices, no copy),
// one write at a time, the last one half-closing the stream; assembles the
// result the server streams back into newly allocated tensors. Completions
// come through the client's CompletionDriver, so Wait() reads the answer
// on the waiting thread.
//
//   CollectiveCall call(&stub, &driver, &contribution, chunk_bytes, buffers);
//   call.Start();
//   absl::StatusOr<std::vector<Tensor>> result = call.Wait();
//
// Contract: see CollectiveAttempt. Start() once, then Wait() once.
#ifndef REDUCER_CLIENT_COLLECTIVE_CALL_H_
#define REDUCER_CLIENT_COLLECTIVE_CALL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/call_payload.h"
#include "client/collective_attempt.h"
#include "client/completion_driver.h"
#include "core/buffer_cache.h"
#include "core/tensor.h"
#include "core/payload_layout.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class CollectiveCall final : public CollectiveAttempt {
 public:
  // `stub`, `driver` and `contribution` must outlive the call. Result
  // tensors take their buffers from `buffers` (may be null).
  CollectiveCall(grpc::GenericStub* stub, CompletionDriver* driver,
                 const Contribution* contribution, size_t chunk_bytes,
                 std::shared_ptr<BufferCache> buffers);
  // Cancels a call still running and waits until gRPC handed it back.
  ~CollectiveCall() override;

  // Sends the call.
  void Start();

  // CollectiveAttempt.
  absl::StatusOr<std::vector<Tensor>> Wait() override;
  bool Ready() override;
  bool received_any() const override;

 private:
  enum class Op { kStart, kRead, kWrite, kFinish };
  struct Tag final : CompletionDriver::Handler {
    Tag(CollectiveCall* call, Op op) : call(call), op(op) {}
    void OnComplete(bool ok) override;
    CollectiveCall* const call;
    const Op op;
  };

  void HandleEventLocked(Op op, bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds message `index` of the payload (the first carries the header).
  grpc::ByteBuffer BuildMessage(size_t index) const;
  size_t NumMessages() const;
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetErrorLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True once the call is over and gRPC holds no operation of it.
  bool OverLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ && operations_ == 0;
  }

  // Constant after construction.
  grpc::GenericStub* const stub_;    // not owned
  CompletionDriver* const driver_;   // not owned
  const Contribution* const contribution_;  // not owned
  const size_t chunk_bytes_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream_;
  Tag start_tag_{this, Op::kStart};
  Tag read_tag_{this, Op::kRead};
  Tag write_tag_{this, Op::kWrite};
  Tag finish_tag_{this, Op::kFinish};

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  int operations_ ABSL_GUARDED_BY(mu_) = 0;  // handed to gRPC, not back yet
  // Writing side: the start and each write take the one write slot.
  bool write_busy_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer outgoing_ ABSL_GUARDED_BY(mu_);
  size_t next_message_ ABSL_GUARDED_BY(mu_) = 0;
  // Reading side: one read outstanding at a time.
  grpc::ByteBuffer incoming_ ABSL_GUARDED_BY(mu_);
  ResultAssembler result_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish came back
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first client-side error
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_COLLECTIVE_CALL_H_

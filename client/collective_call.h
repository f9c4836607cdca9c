// CollectiveCall: one attempt on its own Collective stream (the way large
// payloads travel). Sends this rank's header and packed payload in chunks
// straight from caller memory (static slices, no copy), and assembles the
// result the server streams back into newly allocated tensors. Completions
// run on gRPC's callback threads.
//
//   auto call = std::make_unique<CollectiveCall>(&stub, header, inputs,
//       /*send_payload=*/true, deadline, chunk_bytes, buffers);
//   absl::Status started = call->Start();
//   absl::StatusOr<std::vector<Tensor>> result = call->Wait();
//
// Contract: see CollectiveAttempt. Start() once, then Wait() once.
#ifndef REDUCER_CLIENT_COLLECTIVE_CALL_H_
#define REDUCER_CLIENT_COLLECTIVE_CALL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/call_payload.h"
#include "client/collective_attempt.h"
#include "core/buffer_cache.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class CollectiveCall final
    : public CollectiveAttempt,
      public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `header` lists the tensors this rank declares; `inputs[i]` points at the
  // bytes of header.tensors(i) (ignored when `send_payload` is false).
  // `stub` must outlive the call.
  // Result tensors take their buffers from `buffers` (may be null).
  CollectiveCall(grpc::GenericStub* stub, v1::CollectiveHeader header,
                 std::vector<const void*> inputs, bool send_payload,
                 absl::Time deadline, size_t chunk_bytes,
                 std::shared_ptr<BufferCache> buffers);

  // Sends the call; an error (a header whose tensors do not parse) means
  // nothing was sent and Wait() returns it.
  absl::Status Start();

  // CollectiveAttempt.
  absl::StatusOr<std::vector<Tensor>> Wait() override;
  bool received_any() const override { return result_.started(); }

  // grpc::ClientBidiReactor.
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Builds message `index` of the payload (the first carries the header).
  grpc::ByteBuffer BuildMessage(size_t index) const;
  size_t NumMessages() const;
  void WriteNext();
  void SetError(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  grpc::GenericStub* const stub_;  // not owned
  const v1::CollectiveHeader header_;
  const std::vector<const void*> inputs_;
  const bool send_payload_;
  const size_t chunk_bytes_;
  const std::shared_ptr<BufferCache> buffers_;
  PayloadLayout layout_;
  grpc::ClientContext context_;

  // Writing side: one write outstanding at a time.
  grpc::ByteBuffer outgoing_;
  size_t next_message_ = 0;

  // Reading side: one read outstanding at a time.
  grpc::ByteBuffer incoming_;
  ResultAssembler result_;

  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first client-side error
  bool started_ = false;  // Start() sent the call
  grpc::Status final_status_;  // written in OnDone, read after done_
  absl::Notification done_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_COLLECTIVE_CALL_H_

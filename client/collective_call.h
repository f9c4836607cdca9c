// CollectiveCall: the client side of one Collective stream. Sends this
// rank's header and packed payload in chunks straight from caller memory
// (static slices, no copy), and assembles the result the server streams
// back into newly allocated tensors.
//
//   CollectiveCall call(&stub, request_header, inputs, /*send_payload=*/true,
//                       deadline, chunk_bytes);
//   absl::StatusOr<std::vector<Tensor>> result = call.Run();
//
// Contract: caller memory behind `inputs` is only read, and must stay valid
// and unchanged until Run() returns. Run() blocks until the server finished
// the call or the deadline passed; it returns the result only when every
// byte of it arrived. Not thread-safe: one Run() per object.
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
#include "core/buffer_cache.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

class CollectiveCall final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `header` lists the tensors this rank declares; `inputs[i]` points at the
  // bytes of header.tensors(i) (ignored when `send_payload` is false).
  // `stub` must outlive the call.
  // Result tensors take their buffers from `buffers` (may be null).
  CollectiveCall(grpc::GenericStub* stub, v1::CollectiveHeader header,
                 std::vector<const void*> inputs, bool send_payload,
                 absl::Time deadline, size_t chunk_bytes,
                 std::shared_ptr<BufferCache> buffers);

  // Runs the call. Errors: the server's status, or DATA_LOSS / INTERNAL if
  // the server's answer does not add up (bytes past the result, missing
  // bytes, a result header that does not parse).
  absl::StatusOr<std::vector<Tensor>> Run();

  // After Run(): true if any response message arrived. A call that failed
  // with UNAVAILABLE before that may be retried with the same header.
  bool received_any() const { return have_result_header_; }

  // grpc::ClientBidiReactor.
  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Builds message `index` of the payload (the first carries the header).
  grpc::ByteBuffer BuildMessage(size_t index) const;
  size_t NumMessages() const;
  void WriteNext();
  absl::Status HandleResponse();
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
  bool have_result_header_ = false;
  std::vector<Tensor> result_;
  PayloadLayout result_layout_;
  size_t result_received_ = 0;

  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first client-side error
  grpc::Status final_status_;  // written in OnDone, read after done_
  absl::Notification done_;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_COLLECTIVE_CALL_H_

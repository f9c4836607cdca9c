// The two ends of a collective's bytes on the client, shared by both ways of
// running a call (a Collective stream per call, or the shared Collectives
// stream): PayloadSlices cuts the caller's tensors into the packed payload's
// byte ranges without copying them, and ResultAssembler builds the result
// tensors from the server's response messages.
//
// Thread-compatible.
#ifndef REDUCER_CLIENT_CALL_PAYLOAD_H_
#define REDUCER_CLIENT_CALL_PAYLOAD_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/buffer_cache.h"
#include "core/tensor.h"
#include "core/payload_layout.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// The layout of the tensors `specs` declares (field `field` in messages);
// appends the parsed specs to `out`. INVALID_ARGUMENT naming the field.
absl::StatusOr<PayloadLayout> LayoutOfSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    absl::string_view field, std::vector<TensorSpec>* out);

// Bytes [begin, end) of the packed payload of `inputs` (inputs[i] holds
// tensor i of `layout`), as static slices of caller memory and of a shared
// zero block for the padding. Caller memory must outlive the slices' use.
std::vector<grpc::Slice> PayloadSlices(const PayloadLayout& layout,
                                       const std::vector<const void*>& inputs,
                                       size_t begin, size_t end);

// The whole packed payload of `inputs` copied into one slice, padding
// zeroed. For payloads of many small tensors one copy costs far less than a
// slice per tensor (and per padding gap) through gRPC and the socket, and
// caller memory is no longer read once this returns.
grpc::Slice PackPayload(const PayloadLayout& layout,
                        const std::vector<const void*>& inputs);
// The same packing into `out`, which holds layout.total_bytes.
void PackPayloadTo(const PayloadLayout& layout,
                   const std::vector<const void*>& inputs, char* out);

class ResultAssembler {
 public:
  // Result tensors take their buffers from `buffers` (may be null).
  explicit ResultAssembler(std::shared_ptr<BufferCache> buffers)
      : buffers_(std::move(buffers)) {}

  // Takes one response message. The first must carry the result specs.
  // INTERNAL or DATA_LOSS when it does not add up.
  absl::Status Add(const v1::CollectiveResponse& fields, const SliceRange& data);

  // True once a response message was taken.
  bool started() const { return started_; }

  // The result, once the server said the call succeeded: INTERNAL if no
  // result header came, DATA_LOSS if bytes are missing.
  absl::StatusOr<std::vector<Tensor>> Finish();

 private:
  const std::shared_ptr<BufferCache> buffers_;
  bool started_ = false;
  std::vector<Tensor> result_;
  PayloadLayout layout_;
  size_t received_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_CALL_PAYLOAD_H_

// ResultAssembler builds a collective's result tensors from reducerd's
// response messages, whatever carried them: the gRPC streams (slices of a
// received buffer) and the same-host path (a range of the result segment)
// both hand it the bytes as pieces of memory.
//
// Thread-compatible.
#ifndef REDUCER_CLIENT_INTERNAL_RESULT_ASSEMBLER_H_
#define REDUCER_CLIENT_INTERNAL_RESULT_ASSEMBLER_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/buffer_cache.h"
#include "core/payload_layout.h"
#include "core/result_into.h"
#include "core/tensor.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// The layout of the tensors `specs` declares (field `field` in messages);
// appends the parsed specs to `out`. INVALID_ARGUMENT naming the field.
absl::StatusOr<PayloadLayout> LayoutOfSpecs(
    const google::protobuf::RepeatedPtrField<v1::TensorSpec>& specs,
    absl::string_view field, std::vector<TensorSpec>* out);

// One response message's result bytes: consecutive pieces of memory, valid
// while ResultAssembler::Add runs.
using ResultPieces = absl::Span<const absl::string_view>;

class ResultAssembler {
 public:
  // Result tensors take their buffers from `buffers` (may be null); with
  // `into` (may be null; it outlives this), the result is written there
  // instead, its `landed` told of each message's bytes, and must be
  // into's tensors.
  explicit ResultAssembler(std::shared_ptr<BufferCache> buffers = nullptr,
                           std::shared_ptr<const ResultInto> into = nullptr)
      : buffers_(std::move(buffers)), into_(std::move(into)) {}

  // Takes one response message and its result bytes (placed at the
  // message's `offset`). The first must carry the result specs. INTERNAL or
  // DATA_LOSS when it does not add up (or, with `into`, the specs are not
  // its own).
  absl::Status Add(const v1::CollectiveResponse& fields, ResultPieces data);

  // True once a response message was taken.
  bool started() const { return started_; }

  // The result, once the server said the call succeeded: INTERNAL if no
  // result header came, DATA_LOSS if bytes are missing.
  absl::StatusOr<std::vector<Tensor>> Finish();

 private:
  // Where tensor i's bytes go: result_'s, or into_'s.
  char* DataOf(size_t i);

  const std::shared_ptr<BufferCache> buffers_;
  const std::shared_ptr<const ResultInto> into_;
  bool started_ = false;
  std::vector<Tensor> result_;
  PayloadLayout layout_;
  size_t received_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_INTERNAL_RESULT_ASSEMBLER_H_

// ResultInto: memory a collective's result is written into as its bytes
// arrive, instead of tensors the call allocates, and a callback told of
// each range once it is in place. A relay hands the result of the call it
// makes for its ranks on to them range by range, while the rest is still on
// the wire, and without copying it out of the client library's tensors.
//
//   auto into = std::make_shared<ResultInto>();
//   into->specs = {spec};  into->data = {buffer};  into->offsets = {0};
//   into->landed = [](size_t begin, size_t end) { ... };
//   into->owner = buffer_owner;
//
// A sharded call's partitions each get a ResultInto of their own over
// their pieces of the same memory, with the same callback and offsets
// (client/shards/partition_split.h).
#ifndef REDUCER_CORE_RESULT_INTO_H_
#define REDUCER_CORE_RESULT_INTO_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "core/tensor.h"

namespace reducer {

struct ResultInto {
  // Result tensor i is specs[i] (its op unused); its bytes go to data[i],
  // and `landed` counts them from offsets[i] on (the caller's own
  // numbering: a relay's combined payload's layout).
  std::vector<TensorSpec> specs;
  std::vector<char*> data;
  std::vector<size_t> offsets;
  // Told that bytes [begin, end) are in place. Called on the transport's
  // thread with the transport's lock held, so it must not call into the
  // client library; told of a range twice when a replay writes it again
  // (the same bytes).
  std::function<void(size_t begin, size_t end)> landed;
  // Keeps the memory behind `data` valid (non-null); the result tensors
  // lent over it (LentTensors) hold it.
  std::shared_ptr<const void> owner;
};

// The result tensors over `into`'s memory (Tensor::Lent, held by its owner),
// once every byte is in place.
std::vector<Tensor> LentTensors(const ResultInto& into);

// Why `into` is not memory for exactly `tensors` (as many tensors, data
// pointers and offsets, each tensor of the same dtype and shape, ops aside,
// and an owner), for a message; empty when it is.
std::string WhyNotFor(const ResultInto& into,
                      const std::vector<TensorSpec>& tensors);

}  // namespace reducer

#endif  // REDUCER_CORE_RESULT_INTO_H_

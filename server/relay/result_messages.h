// How a relay hands one upstream result to a rank of its host: the
// messages of the rank's answer, built once per result and shared by every
// rank that gets it, or built per rank from its part of the result (a
// combined reduce-scatter's or scatter's); either way they share the
// result's bytes, never copy them.
#ifndef REDUCER_SERVER_RELAY_RESULT_MESSAGES_H_
#define REDUCER_SERVER_RELAY_RESULT_MESSAGES_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/rank_channel.h"
#include "server/relay/upstream.h"

namespace reducer {

// The messages of `result`, in the order they are sent: the tensors packed
// as their payload layout places them (zeros in the padding between them),
// at most `chunk_bytes` of data each; the first carries the specs. For a
// null `result` (a rank that gets none): one message with no specs and no
// bytes.
std::vector<ResultMessage> ResultMessagesOf(const UpstreamResult* result,
                                            size_t chunk_bytes);

// The messages of part `part` of `parts` of `result`, whose one tensor is
// the parts of `parts` ranks concatenated along dimension 0 (a combined
// reduce-scatter's slices, a combined scatter's parts): its rows [part *
// rows / parts, (part + 1) * rows / parts), as ResultMessagesOf sends a
// result of that one tensor, sharing the result's bytes. INTERNAL when
// `result` is not one tensor whose dimension 0 `parts` divides.
absl::StatusOr<std::vector<ResultMessage>> PartMessagesOf(
    const UpstreamResult& result, int part, int parts, size_t chunk_bytes);

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_RESULT_MESSAGES_H_

// The gRPC edge of the collective engine: received slices into a Payload,
// SharedBytes back into slices, and a ResultMessage into a
// CollectiveResponse on the wire (proto/reducer/v1/collective_codec.h),
// none of it copying tensor bytes. Used by CollectiveReactor and
// CollectivesReactor; the engine itself never sees gRPC types.
//
// Thread-compatible pure functions.
#ifndef REDUCER_SERVER_GRPC_WIRE_BYTES_H_
#define REDUCER_SERVER_GRPC_WIRE_BYTES_H_

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/rank_channel.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

// The received bytes, sharing the slices' memory.
Payload ToPayload(SliceRange range);

// `bytes` as a slice: a sub-slice of the original when they came from one
// (forwarded payload), else a slice that keeps `bytes`' storage alive.
grpc::Slice ToSlice(const SharedBytes& bytes);

// `message` encoded as a CollectiveResponse, with `fields` (call id, status)
// set besides its offset, result specs and data.
grpc::ByteBuffer EncodeResult(const ResultMessage& message,
                              v1::CollectiveResponse fields = {});

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_WIRE_BYTES_H_

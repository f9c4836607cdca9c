// A collective's bytes as gRPC slices, shared by both gRPC ways of running
// an attempt (a Collective RPC each, or the shared Collectives RPC):
// PayloadSlices cuts the caller's tensors into the packed payload's byte
// ranges without copying them, PackPayload copies them into one slice, and
// PiecesOf hands received slices to ResultAssembler.
//
// Thread-compatible.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_PAYLOAD_SLICES_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_PAYLOAD_SLICES_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/payload_layout.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/collective_codec.h"

namespace reducer {

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

// The bytes of `data` as pieces for ResultAssembler::Add; valid while
// `data` (which holds the slices) is.
std::vector<absl::string_view> PiecesOf(const SliceRange& data);

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_PAYLOAD_SLICES_H_

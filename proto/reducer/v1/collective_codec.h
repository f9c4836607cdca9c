// Zero-copy framing of the Collective stream's messages.
//
// CollectiveRequest and CollectiveResponse keep their tensor bytes in field
// 15 (`data`). The generated C++ classes would copy those bytes into a
// std::string on both sides; this codec instead writes the protobuf framing
// by hand around the caller's slices and, on receipt, keeps the received
// slices and hands out the data field's bytes without copying them. The bytes
// on the wire are ordinary protobuf, so clients in other languages use the
// generated stubs unchanged.
//
//   grpc::ByteBuffer out = EncodeMessage(request_without_data, slices);
//   DecodedMessage<v1::CollectiveRequest> in;
//   absl::Status s = DecodeMessage(&buffer, &in);
//   in.data.CopyTo(destination);   // the one copy, into its final place
//
// Thread-compatible: the functions keep no state.
#ifndef REDUCER_PROTO_REDUCER_V1_COLLECTIVE_CODEC_H_
#define REDUCER_PROTO_REDUCER_V1_COLLECTIVE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/reducer.pb.h"

namespace reducer {

// The field number of `data` in CollectiveRequest and CollectiveResponse.
inline constexpr int kDataFieldNumber = 15;

// A view of received bytes that may span several slices. Keeps the slices
// alive (slices are reference counted), so it may outlive the ByteBuffer.
class SliceRange {
 public:
  size_t size() const { return size_; }
  // Copies all bytes to `dest`, which must hold size() bytes.
  void CopyTo(void* dest) const;
  // Copies bytes [begin, begin + n) of this range to `dest`.
  void CopyTo(size_t begin, size_t n, void* dest) const;
  // The bytes as slices sharing the received memory (for forwarding).
  const std::vector<grpc::Slice>& slices() const { return slices_; }
  // Appends a slice (used by the decoder).
  void Append(grpc::Slice slice);

 private:
  std::vector<grpc::Slice> slices_;
  size_t size_ = 0;
};

// Serializes `fields` (a message whose `data` is empty) followed by field 15
// holding the concatenation of `data`. The slices are referenced, not copied:
// static slices must stay valid until the write completes.
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& fields,
                               absl::Span<const grpc::Slice> data);

// The same, with `encoded_fields` (more fields of the same message, already
// serialized) placed before `fields`' bytes and referenced, not copied:
// reducerd encodes a collective's result specs once and sends the same
// slice to every rank.
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& fields,
                               const grpc::Slice& encoded_fields,
                               absl::Span<const grpc::Slice> data);

// `message` encoded as field `field_number` of an enclosing message (tag,
// length, bytes), to pass as EncodeMessage's `encoded_fields` without
// copying `message` into the enclosing one first.
grpc::Slice EncodeField(int field_number,
                        const google::protobuf::MessageLite& message);

// A decoded message: every field but `data` parsed into `fields`, and
// `data` kept as slices of the received buffer.
template <typename Message>
struct DecodedMessage {
  Message fields;
  SliceRange data;
};

// Parses `buffer`. INVALID_ARGUMENT for bytes that are not a valid message
// (truncated varints or fields, wrong wire types, a field running past the
// end). `buffer` is left empty.
absl::Status DecodeMessage(grpc::ByteBuffer* buffer,
                           google::protobuf::MessageLite* fields,
                           SliceRange* data);

template <typename Message>
absl::Status DecodeMessage(grpc::ByteBuffer* buffer,
                           DecodedMessage<Message>* out) {
  return DecodeMessage(buffer, &out->fields, &out->data);
}

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_COLLECTIVE_CODEC_H_

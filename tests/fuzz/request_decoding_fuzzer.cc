// libFuzzer target over what reducerd does with an untrusted Collective
// message before any peer sees it: the hand-written protobuf framing
// (DecodeMessage, with the input split into slices at a fuzzed point), the
// header's decoding (FingerprintFromHeader) and ValidateContribution.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/payload_layout.h"
#include "core/validate.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/reducer/v1/collective_codec.h"
#include "proto/reducer/v1/wire_conversion.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reducer;
  if (size == 0) return 0;
  // The first byte picks where gRPC would have split the message.
  const size_t split = 1 + (size > 1 ? data[0] % (size - 1) : 0);
  std::vector<grpc::Slice> slices;
  slices.emplace_back(data + 1, split - 1);
  slices.emplace_back(data + split, size - split);
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  DecodedMessage<v1::CollectiveRequest> message;
  if (!DecodeMessage(&buffer, &message).ok()) return 0;
  std::vector<char> sink(message.data.size());
  message.data.CopyTo(sink.data());
  if (!message.fields.has_header()) return 0;
  const v1::CollectiveHeader& header = message.fields.header();
  const int world_size = 1 + static_cast<int>(header.sequence() % 8);
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, world_size);
  if (!fp.ok()) return 0;
  if (ValidateContribution(*fp, header.rank(), world_size, 1 << 20).ok() &&
      !ComputePayloadLayout(fp->tensors).ok()) {
    __builtin_trap();
  }
  return 0;
}

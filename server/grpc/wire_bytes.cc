#include "server/grpc/wire_bytes.h"

#include <memory>
#include <utility>
#include <vector>

#include "grpc/slice.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {
namespace {

// Keeps one received slice alive for the SharedBytes made from it.
class SliceOwner final : public ByteOwner {
 public:
  explicit SliceOwner(grpc::Slice slice) : slice_(std::move(slice)) {}
  const grpc::Slice& slice() const { return slice_; }

 private:
  grpc::Slice slice_;
};

// What a slice made from other SharedBytes holds until gRPC drops it.
struct SharedOwnerRef {
  std::shared_ptr<const ByteOwner> owner;
};

void DropSharedOwnerRef(void* ref) { delete static_cast<SharedOwnerRef*>(ref); }

}  // namespace

Payload ToPayload(SliceRange range) {
  Payload out;
  for (const grpc::Slice& slice : range.slices()) {
    auto owner = std::make_shared<const SliceOwner>(slice);
    const char* data = reinterpret_cast<const char*>(owner->slice().begin());
    const size_t size = owner->slice().size();
    out.Append(SharedBytes(std::move(owner), data, size));
  }
  return out;
}

grpc::Slice ToSlice(const SharedBytes& bytes) {
  if (const auto* from_slice = dynamic_cast<const SliceOwner*>(bytes.owner().get())) {
    const grpc::Slice& slice = from_slice->slice();
    const size_t begin =
        bytes.data() - reinterpret_cast<const char*>(slice.begin());
    return slice.sub(begin, begin + bytes.size());
  }
  auto* ref = new SharedOwnerRef{bytes.owner()};
  return grpc::Slice(
      grpc_slice_new_with_user_data(const_cast<char*>(bytes.data()),
                                    bytes.size(), DropSharedOwnerRef, ref),
      grpc::Slice::STEAL_REF);
}

grpc::ByteBuffer EncodeResult(const ResultMessage& message,
                              v1::CollectiveResponse fields) {
  fields.set_offset(message.offset);
  if (message.result_specs != nullptr) {
    for (const TensorSpec& t : *message.result_specs) {
      *fields.add_result() = TensorSpecToWire(t);
    }
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(message.data.size());
  for (const SharedBytes& piece : message.data) slices.push_back(ToSlice(piece));
  return EncodeMessage(fields, slices);
}

}  // namespace reducer

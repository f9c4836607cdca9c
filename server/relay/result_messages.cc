#include "server/relay/result_messages.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"

namespace reducer {
namespace {

// Holds an upstream result's bytes for the messages that share them.
class ResultOwner final : public ByteOwner {
 public:
  explicit ResultOwner(std::shared_ptr<const void> owner)
      : owner_(std::move(owner)) {}

 private:
  std::shared_ptr<const void> owner_;
};

// Zeros for the padding between packed tensors.
const char* Zeros() {
  static const char* zeros = new char[8]();
  return zeros;
}

// The messages of a result of `specs` whose packed bytes are `bytes`, in
// order: at most `chunk_bytes` of data each, the first carrying the specs.
std::vector<ResultMessage> MessagesOf(
    std::shared_ptr<const std::vector<TensorSpec>> specs,
    const std::vector<SharedBytes>& bytes, size_t chunk_bytes) {
  std::vector<ResultMessage> messages;
  ResultMessage message;
  message.result_specs = std::move(specs);
  size_t offset = 0, in_message = 0;
  for (const SharedBytes& piece : bytes) {
    size_t used = 0;
    while (used < piece.size()) {
      const size_t n = std::min(piece.size() - used, chunk_bytes - in_message);
      message.data.push_back(piece.Sub(used, n));
      used += n;
      in_message += n;
      if (in_message == chunk_bytes) {
        messages.push_back(std::move(message));
        offset += in_message;
        message = ResultMessage();
        message.offset = offset;
        in_message = 0;
      }
    }
  }
  if (in_message > 0 || messages.empty())
    messages.push_back(std::move(message));
  return messages;
}

}  // namespace

std::vector<ResultMessage> ResultMessagesOf(const UpstreamResult* result,
                                            size_t chunk_bytes) {
  auto specs = std::make_shared<const std::vector<TensorSpec>>(
      result != nullptr ? result->specs : std::vector<TensorSpec>());
  std::vector<SharedBytes> bytes;
  if (result != nullptr) {
    auto owner = std::make_shared<const ResultOwner>(result->owner);
    absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(*specs);
    size_t pos = 0;
    for (size_t t = 0; layout.ok() && t < specs->size(); ++t) {
      if (layout->offsets[t] > pos) {
        bytes.emplace_back(owner, Zeros(), layout->offsets[t] - pos);
      }
      bytes.emplace_back(owner, static_cast<const char*>(result->data[t]),
                         layout->sizes[t]);
      pos = layout->offsets[t] + layout->sizes[t];
    }
  }
  return MessagesOf(std::move(specs), bytes, chunk_bytes);
}

absl::StatusOr<std::vector<ResultMessage>> PartMessagesOf(
    const UpstreamResult& result, int part, int parts, size_t chunk_bytes) {
  if (result.specs.size() != 1 || result.specs[0].shape.empty() || parts <= 0 ||
      part < 0 || part >= parts || result.specs[0].shape[0] % parts != 0) {
    return absl::InternalError(absl::StrCat(
        "the result upstream gave (", DescribeTensors(result.specs),
        ") is not one tensor of ", parts, " ranks' parts along dimension 0"));
  }
  TensorSpec spec = result.specs[0];
  spec.shape[0] /= parts;
  // The result's spec has a layout (upstream sent its bytes), so its part
  // has one.
  const size_t part_bytes = ComputePayloadLayout({spec})->total_bytes;
  auto owner = std::make_shared<const ResultOwner>(result.owner);
  const SharedBytes whole(owner, static_cast<const char*>(result.data[0]),
                          part_bytes * static_cast<size_t>(parts));
  return MessagesOf(
      std::make_shared<const std::vector<TensorSpec>>(
          std::vector<TensorSpec>{spec}),
      {whole.Sub(static_cast<size_t>(part) * part_bytes, part_bytes)},
      chunk_bytes);
}

}  // namespace reducer

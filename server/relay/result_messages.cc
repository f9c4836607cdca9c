#include "server/relay/result_messages.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
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
  std::vector<ResultMessage> messages;
  ResultMessage message;
  message.result_specs = specs;
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

}  // namespace reducer

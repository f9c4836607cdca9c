#include "server/engine/match_strategy.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

// The answer's bytes: the source's global rank and the message's count.
class AnswerBytes final : public ByteOwner {
 public:
  AnswerBytes(int64_t source, int64_t n) : values_{source, n} {}
  const char* data() const { return reinterpret_cast<const char*>(values_); }
  static constexpr size_t kSize = 2 * sizeof(int64_t);

 private:
  const int64_t values_[2];
};

}  // namespace

MatchStrategy::MatchStrategy(const Fingerprint& reference)
    : receiver_(reference.group.empty() ? -1 : reference.group[0]),
      tag_(reference.tag),
      source_(reference.root) {}

size_t MatchStrategy::Reservation(int /*index*/, size_t /*input_bytes*/) const {
  return 0;
}

std::vector<TensorSpec> MatchStrategy::PlanResult(
    const Fingerprint& /*reference*/, std::vector<RankState>& ranks) {
  for (RankState& r : ranks) r.output_bytes = AnswerBytes::kSize;
  TensorSpec spec;
  spec.dtype = DataType::kInt64;
  spec.shape = {2};
  return {spec};
}

void MatchStrategy::OnAllAttached(Output& out) {
  if (answered_) Answer(out);
}

void MatchStrategy::SetResultValues(const std::vector<int64_t>& values,
                                    bool all_attached, Output& out) {
  if (answered_ || values.size() != 2) return;
  answered_ = true;
  values_[0] = values[0];
  values_[1] = values[1];
  if (all_attached) Answer(out);
}

void MatchStrategy::Answer(Output& out) const {
  auto owner = std::make_shared<const AnswerBytes>(values_[0], values_[1]);
  out.SendTo(0, 0, {SharedBytes(owner, owner->data(), AnswerBytes::kSize)});
}

std::string MatchStrategy::Awaited() const {
  if (source_ < 0) {
    return absl::StrCat("no rank sent to rank ", receiver_, " with tag ", tag_);
  }
  return absl::StrCat("rank ", receiver_, "'s receive from rank ", source_,
                      " with tag ", tag_,
                      " waited for its earlier receive from any rank with "
                      "that tag, which no send matched");
}

}  // namespace reducer

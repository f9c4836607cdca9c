#include "server/engine/quorum_barrier_strategy.h"

#include <memory>
#include <utility>

namespace reducer {
namespace {

// Holds the marks every rank's result shares.
class MarksOwner final : public ByteOwner {
 public:
  explicit MarksOwner(std::vector<int32_t> marks) : marks_(std::move(marks)) {}
  SharedBytes Bytes(const std::shared_ptr<const MarksOwner>& self) const {
    return SharedBytes(self, reinterpret_cast<const char*>(marks_.data()),
                       marks_.size() * sizeof(int32_t));
  }

 private:
  const std::vector<int32_t> marks_;
};

}  // namespace

std::vector<TensorSpec> QuorumBarrierStrategy::PlanResult(
    const Fingerprint& /*reference*/, std::vector<RankState>& ranks) {
  marks_.clear();
  for (RankState& rank : ranks) {
    marks_.push_back(rank.left_out  ? kQuorumLeftOut
                     : rank.joining ? kQuorumJoined
                                    : kQuorumContributor);
    rank.output_bytes = rank.left_out ? 0 : ranks.size() * sizeof(int32_t);
  }
  TensorSpec spec;
  spec.dtype = DataType::kInt32;
  spec.shape = {static_cast<int64_t>(ranks.size())};
  return {spec};
}

bool QuorumBarrierStrategy::GetsResult(int index) const {
  return marks_.empty() || marks_[index] != kQuorumLeftOut;
}

void QuorumBarrierStrategy::OnAllAttached(Output& out) {
  auto owner = std::make_shared<const MarksOwner>(marks_);
  const SharedBytes bytes = owner->Bytes(owner);
  for (size_t i = 0; i < marks_.size(); ++i) {
    if (marks_[i] != kQuorumLeftOut)
      out.SendTo(static_cast<int>(i), 0, {bytes});
  }
}

}  // namespace reducer

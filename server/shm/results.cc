#include "server/shm/results.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/shm/control_segment.h"

namespace reducer {
namespace {

bool SameOwner(const std::weak_ptr<const ByteOwner>& a,
               const std::weak_ptr<const ByteOwner>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

bool Matches(const SharedMemoryResults::Identity& a,
             const SharedMemoryResults::Identity& b) {
  return a.data != nullptr && a.data == b.data && a.bytes == b.bytes &&
         a.offset == b.offset && SameOwner(a.owner, b.owner);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryResults>>
SharedMemoryResults::Create(size_t bytes) {
  absl::StatusOr<SharedSegment> segment = SharedSegment::Create(
      "reducer-result", bytes, SharedSegment::Writers::kCreatorOnly);
  if (!segment.ok()) return segment.status();
  return std::make_unique<SharedMemoryResults>(*std::move(segment));
}

SharedMemoryResults::SharedMemoryResults(SharedSegment segment)
    : segment_(std::move(segment)),
      nonce_(RandomBytes(ControlSegment::kNonceBytes)),
      ranges_(segment_.size()) {
  std::memcpy(segment_.data(), nonce_.data(), nonce_.size());
  ranges_.Allocate(ControlSegment::kNonceBytes);  // the nonce's 64 bytes
}

std::shared_ptr<SharedMemoryResults::Writing> SharedMemoryResults::Open(
    const Identity& identity) {
  for (const std::shared_ptr<Writing>& w : writing_) {
    if (Matches(w->identity, identity)) {
      ++w->writers;
      ++refs_[w->range];
      return w;
    }
  }
  std::optional<uint64_t> at = ranges_.Allocate(identity.bytes);
  if (!at.has_value()) return nullptr;
  auto w = std::make_shared<Writing>();
  w->range = *at;
  w->identity = identity;
  w->writers = 1;
  refs_[*at] = 1;
  writing_.push_back(w);
  return w;
}

void SharedMemoryResults::Close(const std::shared_ptr<Writing>& writing) {
  --writing->writers;
}

bool SharedMemoryResults::Unref(uint64_t range) {
  auto it = refs_.find(range);
  if (it == refs_.end()) return false;
  if (--it->second > 0) return true;
  refs_.erase(it);
  ranges_.Free(range);
  writing_.erase(std::remove_if(writing_.begin(), writing_.end(),
                                [range](const std::shared_ptr<Writing>& w) {
                                  return w->range == range;
                                }),
                 writing_.end());
  return true;
}

}  // namespace reducer

// RelayCollective's streamed result (relay_collective.h, "Streamed"): an
// all-reduce's result is written into the relay's memory as it comes back
// from upstream, and each member's messages go as their bytes land. The
// rest of RelayCollective is in relay_collective.cc.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/relay/relay_collective.h"

namespace reducer {

bool RelayCollective::Landed(const LandedRanges& landed, const Member& m,
                             const ResultMessage& message) {
  const size_t begin = m.answer_base + message.offset;
  size_t end = begin;
  for (const SharedBytes& piece : message.data) end += piece.size();
  return landed.Covers(begin, end);
}

std::shared_ptr<const ResultInto> RelayCollective::StreamResultLocked() {
  const Fingerprint& ref = members_[0].fp;
  if (ref.kind != CollectiveKind::kAllReduce ||
      (combine_ != Combine::kReduce && combine_ != Combine::kAlone)) {
    return nullptr;
  }
  // The job checked the tensors: their layout exists.
  const PayloadLayout layout = *ComputePayloadLayout(ref.tensors);
  if (layout.total_bytes == 0) return nullptr;
  auto memory = std::make_shared<Buffer>(
      env_.buffers != nullptr ? env_.buffers->Get(layout.total_bytes)
                              : AllocateBuffer(layout.total_bytes));
  char* base = static_cast<char*>(memory->get());
  auto landing = std::make_shared<Landing>(layout.total_bytes);
  {
    absl::MutexLock lock(&landing->mu);
    size_t end = 0;  // of the tensor before
    for (size_t i = 0; i < layout.offsets.size(); ++i) {
      landing->landed.Add(end, layout.offsets[i]);
      end = layout.offsets[i] + layout.sizes[i];
    }
    landing->landed.Add(end, layout.total_bytes);
  }
  auto into = std::make_shared<ResultInto>();
  into->specs = ref.tensors;
  for (size_t offset : layout.offsets) {
    into->data.push_back(base + offset);
    into->offsets.push_back(offset);
  }
  into->owner = memory;
  // On the transport's thread: notes the bytes, and hands the sending to
  // the reduction pool (once at a time), so that the transport goes on
  // reading while the members' messages are written, and this collective
  // is never let go of under the transport's lock.
  std::weak_ptr<RelayCollective> weak = weak_from_this();
  into->landed = [landing, weak](size_t begin, size_t end) {
    {
      absl::MutexLock lock(&landing->mu);
      landing->landed.Add(begin, end);
      if (landing->send_scheduled) return;
      landing->send_scheduled = true;
    }
    std::shared_ptr<RelayCollective> self = weak.lock();
    if (self == nullptr) return;
    ThreadPool* pool = self->env_.reduction_pool;
    auto send = [landing, self = std::move(self)] {
      {
        absl::MutexLock lock(&landing->mu);
        landing->send_scheduled = false;
      }
      self->SendLanded();
    };
    if (pool != nullptr) {
      pool->Schedule(std::move(send));
    } else {
      send();
    }
  };
  landing_ = std::move(landing);
  UpstreamResult result;
  result.specs = into->specs;
  result.data.assign(into->data.begin(), into->data.end());
  result.owner = memory;
  DeliverResultLocked(result);  // queued; sent as the bytes land
  return into;
}

void RelayCollective::SendLanded() {
  absl::MutexLock lock(&mu_);
  if (!failed_) SendReadyLocked();
}

bool RelayCollective::EndStreamedLocked() {
  bool whole;
  {
    absl::MutexLock lock(&landing_->mu);
    whole = landing_->landed.Covers(0, landing_->bytes);
  }
  if (!whole) {
    FailLocked(absl::InternalError(absl::StrCat(
        description_,
        ": upstream ended the call with OK before all of its result came")));
    return false;
  }
  upstream_ok_ = true;
  return true;
}

size_t RelayCollective::NextToSendLocked(const Member& m) const {
  const size_t none = m.to_send.size();
  const size_t next = none - 1;  // in order: sent from the back
  if (here_) return ReadyToSendLocked(m) ? next : none;
  if (landing_ == nullptr) return next;
  // The last message ends the member's call with OK.
  if (next == 0) return upstream_ok_ ? 0 : none;
  Landing& landing = *landing_;
  absl::MutexLock lock(&landing.mu);
  // The first carries the result's specs: it goes first.
  if (m.to_send[next].result_specs != nullptr) {
    return Landed(landing.landed, m, m.to_send[next]) ? next : none;
  }
  for (size_t i = next; i > 0; --i) {
    if (Landed(landing.landed, m, m.to_send[i])) return i;
  }
  return none;
}

}  // namespace reducer

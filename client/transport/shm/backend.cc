#include "client/transport/shm/backend.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/result_assembler.h"
#include "client/internal/settled_attempt.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "core/shm/shared_segment.h"

namespace reducer {
namespace {

// How often the poller looks at the socket when no response comes.
constexpr absl::Duration kSocketCheckEvery = absl::Milliseconds(50);
// How long callers must have left the ring alone before the reader thread
// takes it.
constexpr absl::Duration kIdleGrace = absl::Milliseconds(5);
// reducerd's nonce; no result range starts below it.
constexpr uint64_t kResultHeaderBytes = 64;

}  // namespace

// One call in flight, shared by its attempt and the poller; its outcome is
// guarded by the backend's mu_.
struct SharedMemoryBackend::Call {
  bool done = false;
  bool answered = false;  // a response came
  bool cancelled = false;
  bool watched = false;   // its attempt was asked Settled()
  bool may_lend = false;  // Contribution::result_may_be_lent (set at start)
  std::shared_ptr<const ResultInto> into;  // Contribution::result_into
  bool waiting = false;   // its caller is inside Attempt::Wait()
  absl::StatusOr<std::vector<Tensor>> outcome =
      absl::UnknownError("no outcome yet");
  std::optional<uint64_t> input_offset;  // set before the call is sent
};

// See lending_. Return() may run on any thread, with none of the backend's
// locks held.
struct SharedMemoryBackend::Lending {
  explicit Lending(std::unique_ptr<SharedSegment> segment)
      : result(std::move(segment)) {}

  // Hands `range` back to reducerd now when the request ring takes it,
  // else leaves it for the poller's FlushReleases; drops it once the
  // backend is gone (reducerd frees a closed session's ranges).
  void Return(std::pair<uint64_t, uint64_t> range) {
    absl::MutexLock lock(&mu);
    if (backend == nullptr) return;
    v1::CollectiveRequest release;
    v1::SegmentRange* r = release.add_released();
    r->set_offset(range.first);
    r->set_size(range.second);
    if (!backend->TryPushRequest(release.SerializeAsString())) {
      returned.push_back(range);
    }
  }

  const std::unique_ptr<SharedSegment> result;
  absl::Mutex mu;
  SharedMemoryBackend* backend ABSL_GUARDED_BY(mu) = nullptr;
  std::vector<std::pair<uint64_t, uint64_t>> returned ABSL_GUARDED_BY(mu);
};

// One lent result's range: returned when the last tensor lent from it is
// dropped (each holds it as its Tensor::Lent lender).
class SharedMemoryBackend::LentRange {
 public:
  LentRange(std::shared_ptr<Lending> lending,
            std::pair<uint64_t, uint64_t> range)
      : lending_(std::move(lending)), range_(range) {}
  ~LentRange() { lending_->Return(range_); }
  LentRange(const LentRange&) = delete;
  LentRange& operator=(const LentRange&) = delete;

 private:
  const std::shared_ptr<Lending> lending_;
  const std::pair<uint64_t, uint64_t> range_;
};

class SharedMemoryBackend::Attempt final : public CollectiveAttempt {
 public:
  Attempt(SharedMemoryBackend* backend, std::shared_ptr<Call> call,
          uint64_t call_id, absl::Time deadline)
      : backend_(backend),
        call_(std::move(call)),
        call_id_(call_id),
        deadline_(deadline) {}

  absl::StatusOr<std::vector<Tensor>> Wait() override {
    SharedMemoryBackend* const b = backend_;
    Call& call = *call_;
    auto over = [&call]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return call.done || call.cancelled;  // called with b->mu_ held
    };
    b->mu_.Lock();
    ++b->waiting_;
    call.waiting = true;  // a result that comes now may be lent
    while (!over() && absl::Now() < deadline_) {
      if (!b->polling_) {
        b->polling_ = true;
        b->mu_.Unlock();
        b->PollUntil(over, deadline_);
        b->mu_.Lock();
        b->polling_ = false;
        continue;
      }
      // Another thread polls: it settles this call, or leaves the ring.
      auto turn = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return over() || !b->polling_;  // evaluated with b->mu_ held
      };
      b->mu_.AwaitWithDeadline(absl::Condition(&turn), deadline_);
    }
    --b->waiting_;
    call.waiting = false;
    b->last_wait_end_ = absl::Now();
    const bool done = call.done;
    const bool cancelled = call.cancelled;
    received_any_ = call.answered;
    absl::StatusOr<std::vector<Tensor>> outcome =
        done ? std::move(call.outcome)
             : absl::StatusOr<std::vector<Tensor>>(
                   cancelled
                       ? absl::CancelledError("the collective was cancelled")
                       : absl::DeadlineExceededError(absl::StrCat(
                             "no answer from reducerd at ", backend_->target_,
                             " over shared memory before the "
                             "call's deadline")));
    b->mu_.Unlock();
    if (!done && !cancelled) b->SendCancel(call_id_);
    return outcome;
  }
  bool Ready() override { return Settled(); }
  bool Settled() override {
    absl::MutexLock lock(&backend_->mu_);
    call_->watched = true;
    return call_->done;
  }
  void Cancel() override {
    {
      absl::MutexLock lock(&backend_->mu_);
      if (call_->done || call_->cancelled) return;
      call_->cancelled = true;
    }
    backend_->SendCancel(call_id_);
    // A poller sleeping on the ring's bell looks again.
    backend_->channel_.control->responses().data_bell().Ring();
  }
  bool received_any() const override { return received_any_; }

 private:
  SharedMemoryBackend* const backend_;
  const std::shared_ptr<Call> call_;
  const uint64_t call_id_;
  const absl::Time deadline_;
  bool received_any_ = false;
};

SharedMemoryBackend::SharedMemoryBackend(
    SharedMemoryChannel channel, std::string target,
    std::shared_ptr<BufferCache> buffers,
    std::function<void()> on_watched_settle)
    : lending_(std::make_shared<Lending>(std::move(channel.result))),
      channel_(std::move(channel)),
      target_(std::move(target)),
      buffers_(std::move(buffers)),
      on_watched_settle_(std::move(on_watched_settle)),
      input_ranges_(channel_.input->size()),
      reader_([this] { ReadResponses(); }) {
  absl::MutexLock lock(&lending_->mu);
  lending_->backend = this;
}

SharedMemoryBackend::~SharedMemoryBackend() {
  {
    // Lent ranges dropped from now on are not handed back: closing the
    // session frees them all.
    absl::MutexLock lock(&lending_->mu);
    lending_->backend = nullptr;
  }
  ::shutdown(channel_.socket.get(), SHUT_RDWR);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  channel_.control->responses().data_bell().Ring();  // wakes the reader
  reader_.join();
  Break(absl::CancelledError(absl::StrCat(
      "the client closed its shared-memory session with reducerd at ",
      target_)));
}

absl::Status SharedMemoryBackend::status() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

std::unique_ptr<CollectiveAttempt> SharedMemoryBackend::Start(
    const Contribution& contribution) {
  std::unique_ptr<CollectiveAttempt> attempt = TryStart(contribution);
  if (attempt != nullptr) return attempt;
  absl::Status why = status();
  if (why.ok()) {
    why = absl::ResourceExhaustedError(absl::StrCat(
        "a payload of ", contribution.payload_bytes(),
        " bytes does not fit in "
        "the free part of the shared-memory input segment (",
        input_ranges_.size(), " bytes, ClientOptions::shared_memory_bytes)"));
  }
  return std::make_unique<FailedAttempt>(why);
}

std::unique_ptr<CollectiveAttempt> SharedMemoryBackend::TryStart(
    const Contribution& contribution) {
  if (!status().ok()) return nullptr;
  const size_t bytes = contribution.payload_bytes();
  // Device staging may still be filling the inputs; they are packed whole.
  absl::Status ready = contribution.AwaitPayload(bytes);
  if (!ready.ok()) return std::make_unique<FailedAttempt>(std::move(ready));
  v1::CollectiveRequest request;
  const uint64_t call_id = next_call_id_.fetch_add(1);
  request.set_call_id(call_id);
  *request.mutable_header() = contribution.header;
  auto call = std::make_shared<Call>();
  call->may_lend = contribution.result_may_be_lent;
  call->into = contribution.result_into;
  auto settle = [this, &call](absl::Status status) {
    absl::MutexLock lock(&mu_);
    call->done = true;
    call->outcome = std::move(status);
  };
  if (bytes > kInlineBytes) {
    call->input_offset = input_ranges_.Allocate(bytes);
    if (!call->input_offset) return nullptr;
    PackPayloadTo(
        contribution.layout, contribution.inputs,
        static_cast<char*>(channel_.input->data()) + *call->input_offset);
    request.mutable_data_range()->set_offset(*call->input_offset);
    request.mutable_data_range()->set_size(bytes);
  } else if (bytes > 0) {
    std::string* data = request.mutable_data();
    data->resize(bytes);
    PackPayloadTo(contribution.layout, contribution.inputs, data->data());
  }
  const std::string record = request.SerializeAsString();
  if (record.size() > channel_.control->requests().max_record_bytes()) {
    if (call->input_offset) input_ranges_.Free(*call->input_offset);
    return nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    calls_[call_id] = call;
  }
  absl::Status pushed;
  {
    absl::MutexLock lock(&push_mu_);
    pushed = channel_.control->requests().Push(record, contribution.deadline);
  }
  if (!pushed.ok()) {
    // Nothing was published: the call is ours alone again.
    {
      absl::MutexLock lock(&mu_);
      calls_.erase(call_id);
    }
    if (call->input_offset) input_ranges_.Free(*call->input_offset);
    settle(
        absl::Status(pushed.code(),
                     absl::StrCat("sending to reducerd at ", target_,
                                  " over shared memory: ", pushed.message())));
  }
  return std::make_unique<Attempt>(this, std::move(call), call_id,
                                   contribution.deadline);
}

bool SharedMemoryBackend::TryPushRequest(const std::string& record) {
  absl::MutexLock lock(&push_mu_);
  absl::StatusOr<bool> pushed = channel_.control->requests().TryPush(record);
  return pushed.ok() && *pushed;
}

void SharedMemoryBackend::SendCancel(uint64_t call_id) {
  v1::CollectiveRequest cancel;
  cancel.set_call_id(call_id);
  TryPushRequest(cancel.SerializeAsString());
}

void SharedMemoryBackend::FlushReleases() {
  {
    absl::MutexLock lock(&lending_->mu);
    releases_.insert(releases_.end(), lending_->returned.begin(),
                     lending_->returned.end());
    lending_->returned.clear();
  }
  if (releases_.empty()) return;
  v1::CollectiveRequest release;
  for (const auto& [offset, size] : releases_) {
    v1::SegmentRange* range = release.add_released();
    range->set_offset(offset);
    range->set_size(size);
  }
  if (TryPushRequest(release.SerializeAsString())) releases_.clear();
}

void SharedMemoryBackend::ReadResponses() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (!polling_ && waiting_ == 0);
      };
      mu_.Await(absl::Condition(&idle));
      if (stop_) return;
      // Callers that poll in a loop of collectives leave the ring alone
      // only between calls: taking it then would cost each call a hand-off.
      const absl::Duration quiet = absl::Now() - last_wait_end_;
      if (quiet < kIdleGrace) {
        mu_.AwaitWithTimeout(absl::Condition(&stop_), kIdleGrace - quiet);
        continue;
      }
      polling_ = true;
    }
    // Until a caller comes to wait (it then takes the ring over).
    PollUntil([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                  mu_) { return stop_ || waiting_ > 0 || !broken_.ok(); },
              absl::InfiniteFuture());
    absl::MutexLock lock(&mu_);
    polling_ = false;
    if (!broken_.ok()) return;
  }
}

void SharedMemoryBackend::PollUntil(const std::function<bool()>& done,
                                    absl::Time deadline) {
  MessageRing& responses = channel_.control->responses();
  while (true) {
    const uint32_t seen = responses.data_bell().value();
    if (!DrainResponses()) return;
    FlushReleases();
    {
      absl::MutexLock lock(&mu_);
      if (done() || !broken_.ok()) return;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return;
    const absl::StatusOr<uint32_t> waited = responses.data_bell().WaitChange(
        seen, std::min(deadline, now + kSocketCheckEvery));
    if (waited.ok()) continue;
    if (waited.status().code() == absl::StatusCode::kPermissionDenied) {
      // The kernel refuses to sleep on the bell (a seccomp profile that
      // answers futex with EPERM): look again every millisecond rather
      // than spin.
      absl::SleepFor(absl::Milliseconds(1));
    }
    if (SocketClosed()) {
      Break(absl::UnavailableError(absl::StrCat(
          "lost the shared-memory session with reducerd at ", target_,
          ": its socket closed (reducerd stopped or died)")));
      return;
    }
  }
}

bool SharedMemoryBackend::DrainResponses() {
  MessageRing& responses = channel_.control->responses();
  std::string record;
  while (true) {
    absl::StatusOr<bool> popped = responses.TryPop(&record);
    if (!popped.ok()) {
      Break(absl::UnavailableError(
          absl::StrCat("the shared-memory session with reducerd at ", target_,
                       " broke: ", popped.status().message())));
      return false;
    }
    if (!*popped) return true;
    if (!HandleResponse(record)) return false;
  }
}

bool SharedMemoryBackend::HandleResponse(const std::string& record) {
  v1::CollectiveResponse response;
  if (!response.ParseFromString(record) || response.call_id() == 0) {
    Break(absl::UnavailableError(
        absl::StrCat("reducerd at ", target_,
                     " sent a shared-memory response that does "
                     "not parse")));
    return false;
  }
  std::shared_ptr<Call> call;
  bool lend;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(response.call_id());
    if (it == calls_.end()) return true;  // answered twice: nothing waits
    call = std::move(it->second);
    calls_.erase(it);
    // Lent only to a caller waiting now, who copies it out at once: a
    // result not yet waited for is copied out and its range handed back
    // here, as it would hold reducerd's segment for as long as it waits.
    lend = call->may_lend && call->waiting && call->into == nullptr;
  }
  if (call->input_offset) input_ranges_.Free(*call->input_offset);
  std::optional<std::pair<uint64_t, uint64_t>> range;
  if (response.has_data_range()) {
    range.emplace(response.data_range().offset(), response.data_range().size());
  }
  const absl::Status status(
      static_cast<absl::StatusCode>(response.status().code()),
      response.status().message());
  if (!status.ok()) {
    if (range) releases_.push_back(*range);
    Settle(*call, status, /*from_reducerd=*/true);
    return true;
  }
  absl::string_view data = response.data();
  if (range) {
    const uint64_t end = range->first + range->second;
    if (range->first < kResultHeaderBytes || end < range->first ||
        end > lending_->result->size()) {
      Settle(*call,
             absl::DataLossError(absl::StrCat(
                 "reducerd at ", target_, " placed a result at bytes [",
                 range->first, ", ", end, ") outside its ",
                 lending_->result->size(), "-byte result segment")),
             /*from_reducerd=*/true);
      return true;
    }
    data = absl::string_view(
        static_cast<const char*>(lending_->result->data()) + range->first,
        range->second);
    if (lend) {
      std::optional<std::vector<Tensor>> lent =
          LendResult(response, *range, data);
      if (lent.has_value()) {
        Settle(*call, *std::move(lent), /*from_reducerd=*/true);
        return true;  // the range goes back when the tensors are dropped
      }
    }
  }
  ResultAssembler result(buffers_, call->into);
  response.set_offset(0);
  absl::Status added = result.Add(response, {data});
  if (range) releases_.push_back(*range);  // copied out (or given up)
  Settle(
      *call,
      added.ok() ? result.Finish() : absl::StatusOr<std::vector<Tensor>>(added),
      /*from_reducerd=*/true);
  return true;
}

std::optional<std::vector<Tensor>> SharedMemoryBackend::LendResult(
    const v1::CollectiveResponse& response, std::pair<uint64_t, uint64_t> range,
    absl::string_view data) {
  std::vector<TensorSpec> specs;
  absl::StatusOr<PayloadLayout> layout =
      LayoutOfSpecs(response.result(), "result", &specs);
  if (!layout.ok() || layout->total_bytes != data.size()) return std::nullopt;
  auto lent = std::make_shared<const LentRange>(lending_, range);
  std::vector<Tensor> tensors;
  tensors.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    tensors.push_back(Tensor::Lent(specs[i].dtype, std::move(specs[i].shape),
                                   data.data() + layout->offsets[i], lent));
  }
  return tensors;
}

void SharedMemoryBackend::Break(const absl::Status& status) {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = status;
    calls.swap(calls_);
  }
  // Their input ranges stay allocated: nothing is sent any more.
  for (auto& [id, call] : calls) Settle(*call, status, /*from_reducerd=*/false);
}

void SharedMemoryBackend::Settle(Call& call,
                                 absl::StatusOr<std::vector<Tensor>> outcome,
                                 bool from_reducerd) {
  bool watched;
  {
    absl::MutexLock lock(&mu_);
    if (call.done) return;
    call.done = true;
    call.answered = from_reducerd;
    call.outcome = std::move(outcome);
    watched = call.watched;
  }
  if (watched && on_watched_settle_ != nullptr) on_watched_settle_();
}

bool SharedMemoryBackend::SocketClosed() const {
  pollfd p{};
  p.fd = channel_.socket.get();
  p.events = POLLIN | POLLRDHUP;
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0 ||
         (p.revents & POLLIN) != 0;  // reducerd sends nothing after welcome
}

}  // namespace reducer

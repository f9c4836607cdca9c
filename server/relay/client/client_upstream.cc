#include "server/relay/client/client_upstream.h"

#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "client/internal/client_session.h"
#include "client/internal/collective_request.h"
#include "client/internal/input_gate.h"
#include "client/staging/host_memory_staging.h"
#include "core/payload_layout.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "server/relay/joinable_threads.h"

namespace reducer {
namespace {

// True on a thread that runs a session's call (its thread of its own) or
// its `ended` callback (the ClientSession's OnEnd thread): a session let go
// there must not wait for that very thread (see ~ClientUpstreamSession).
thread_local bool on_session_thread = false;

// The relay's upstream payload as the client library reads it.
class InputOfRelay final : public InputGate {
 public:
  explicit InputOfRelay(std::shared_ptr<UpstreamInput> input)
      : input_(std::move(input)) {}
  absl::Status Await(size_t end, absl::Time deadline) const override {
    return input_->Await(end, deadline);
  }

 private:
  const std::shared_ptr<UpstreamInput> input_;
};

class ClientUpstreamSession final : public UpstreamSession {
 public:
  // `enders`: the ClientUpstream's, which joins them before it goes.
  ClientUpstreamSession(std::unique_ptr<ClientSession> session,
                        std::shared_ptr<JoinableThreads> enders)
      : session_(std::move(session)),
        calls_(std::make_unique<JoinableThreads>()),
        enders_(std::move(enders)) {}

  // Waits for the calls' threads, then ends the ClientSession. The relay
  // may let go of a session on one of the session's own threads (the last
  // call's result, or the session's end, ending the epoch there): then
  // that waiting and ending go to a thread of the ClientUpstream's enders,
  // so that no thread joins itself, the call's thread may finish with the
  // ClientSession still there, and the relay waits for the end as it
  // exits.
  ~ClientUpstreamSession() override {
    auto finish = [calls = std::move(calls_),
                   session = std::move(session_)]() mutable {
      calls->JoinAll();
      session.reset();
    };
    if (on_session_thread) {
      enders_->Start(std::move(finish));
    } else {
      finish();
    }
  }

  void Start(
      v1::CollectiveHeader header, std::shared_ptr<UpstreamInput> input,
      std::shared_ptr<const ResultInto> into,
      std::function<void(absl::StatusOr<UpstreamResult>)> done) override {
    // The tensors were validated by the relay's job: their layout exists.
    std::vector<TensorSpec> specs;
    for (const v1::TensorSpec& wire : header.tensors()) {
      absl::StatusOr<TensorSpec> spec =
          TensorSpecFromWire(wire, /*with_op=*/true, "tensors");
      if (!spec.ok()) {
        done(spec.status());
        return;
      }
      specs.push_back(*spec);
    }
    absl::StatusOr<PayloadLayout> layout = ComputePayloadLayout(specs);
    if (!layout.ok()) {
      done(layout.status());
      return;
    }
    std::vector<const void*> inputs;
    const bool sends = input->size() > 0;
    for (size_t offset : layout->offsets) {
      inputs.push_back(sends ? input->data() + offset : nullptr);
    }
    if (!sends) inputs.clear();
    auto gate = std::make_shared<InputOfRelay>(input);
    const absl::Time deadline =
        absl::Now() + absl::Milliseconds(header.timeout_ms()) + kDeadlineSlack;
    // Started on a thread of its own: the client library may wait for the
    // first payload bytes as it starts, which the caller is about to feed.
    // The ClientSession outlives the call's thread (see the destructor).
    calls_->Start([session = session_.get(), header = std::move(header),
                   inputs = std::move(inputs), deadline, gate, input,
                   into = std::move(into), done = std::move(done)]() mutable {
      on_session_thread = true;
      std::unique_ptr<PendingCollective> pending =
          session->StartForwarded(std::move(header), std::move(inputs),
                                  gate.get(), deadline, std::move(into));
      absl::StatusOr<std::vector<Tensor>> tensors = pending->Wait();
      if (!tensors.ok()) {
        done(tensors.status());
        return;
      }
      auto owned = std::make_shared<std::vector<Tensor>>(*std::move(tensors));
      UpstreamResult result;
      for (const Tensor& t : *owned) {
        TensorSpec spec;
        spec.dtype = t.dtype();
        spec.shape = t.shape();
        result.specs.push_back(std::move(spec));
        result.data.push_back(t.data());
      }
      result.owner = owned;
      done(std::move(result));
    });
  }

  void Leave(const std::string& cause) override {
    session_->LeaveWithCause(cause).IgnoreError();
  }

  absl::Status LoseRanks(const std::vector<int>& ranks,
                         const std::string& cause) override {
    return session_->LoseRanks(ranks, cause);
  }

  uint64_t FirstQuorumStep() const override {
    return session_->FirstQuorumStep();
  }

  ClientSession& session() { return *session_; }

 private:
  std::unique_ptr<ClientSession> session_;  // set until destroyed
  // One thread per call in flight, waiting for its result.
  std::unique_ptr<JoinableThreads> calls_;
  const std::shared_ptr<JoinableThreads> enders_;
};

}  // namespace

ClientUpstream::ClientUpstream(ClientOptions options)
    : options_(std::move(options)),
      enders_(std::make_shared<JoinableThreads>()) {}

ClientUpstream::~ClientUpstream() { enders_->JoinAll(); }

absl::StatusOr<std::unique_ptr<UpstreamSession>> ClientUpstream::Open(
    const std::string& job, int world_size, const std::vector<int>& ranks,
    std::function<bool()> given_up,
    std::function<void(const absl::Status&)> ended) {
  ClientOptions options = options_;
  options.job = job;
  options.world_size = world_size;
  options.rank = ranks.front();
  options.local_world_size = static_cast<int>(ranks.size());
  // Upstream is another host's; the same-host path takes one rank per
  // session, not a relay's several.
  options.shared_memory = SharedMemory::kOff;
  absl::StatusOr<std::unique_ptr<ClientSession>> session =
      ClientSession::OpenForRanks(
          options, ranks,
          NewHostMemoryStaging("a relay forwards host memory only: its ranks "
                               "stage device tensors themselves"),
          std::move(given_up));
  if (!session.ok()) return session.status();
  (*session)->OnEnd([ended = std::move(ended)](const absl::Status& why) {
    on_session_thread = true;
    ended(why);
    on_session_thread = false;
  });
  return std::unique_ptr<UpstreamSession>(
      std::make_unique<ClientUpstreamSession>(*std::move(session), enders_));
}

}  // namespace reducer

#include "tests/raw_client.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace reducer {
namespace testing {
namespace {

std::string RandomId() {
  absl::BitGen gen;
  return absl::StrFormat("raw%016x", absl::Uniform<uint64_t>(gen));
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace

grpc::ChannelArguments RawChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

RawSession::RawSession(std::string target, std::string job,
                       std::vector<int> ranks, std::string token)
    : target_(std::move(target)),
      job_(std::move(job)),
      rank_(ranks.front()),
      ranks_(std::move(ranks)),
      token_(std::move(token)),
      session_id_(RandomId()) {}

void RawSession::Authorize(grpc::ClientContext* context) const {
  if (!token_.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
}

v1::JoinRequest JoinRequestFor(const std::string& job, int rank, int world_size,
                               const std::string& session_id) {
  v1::JoinRequest request;
  request.set_job(job);
  request.set_rank(rank);
  request.set_world_size(world_size);
  request.set_session_id(session_id);
  return request;
}

absl::StatusOr<std::unique_ptr<RawSession>> RawSession::Join(
    const std::string& target, const std::string& job, int rank,
    int world_size, absl::Duration timeout, const std::string& token) {
  return JoinWith(target, JoinRequestFor(job, rank, world_size, ""), timeout,
                  token);
}

absl::StatusOr<std::unique_ptr<RawSession>> RawSession::JoinRanks(
    const std::string& target, const std::string& job,
    const std::vector<int>& ranks, int world_size, absl::Duration timeout,
    const std::string& token) {
  v1::JoinRequest request = JoinRequestFor(job, ranks.front(), world_size, "");
  for (int rank : ranks) request.add_ranks(rank);
  return JoinWith(target, request, timeout, token);
}

absl::StatusOr<std::unique_ptr<RawSession>> RawSession::JoinWith(
    const std::string& target, const v1::JoinRequest& join,
    absl::Duration timeout, const std::string& token) {
  std::vector<int> ranks(join.ranks().begin(), join.ranks().end());
  if (ranks.empty()) ranks.push_back(join.rank());
  std::unique_ptr<RawSession> session(
      new RawSession(target, join.job(), std::move(ranks), token));
  session->channel_ = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), RawChannelArguments());
  session->stub_ = v1::Reducer::NewStub(session->channel_);
  v1::JoinRequest request = join;
  request.set_session_id(session->session_id_);
  session->Authorize(&session->join_context_);
  session->join_reader_ =
      session->stub_->Join(&session->join_context_, request);
  RawSession* raw = session.get();
  session->event_thread_ = std::thread([raw] { raw->ReadEvents(); });

  absl::MutexLock lock(&session->mu_);
  auto ready_or_ended = [raw]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(raw->mu_) {
    return raw->ready_ || raw->ended_;
  };
  session->mu_.AwaitWithTimeout(absl::Condition(&ready_or_ended), timeout);
  if (session->ready_) {
    session->epoch_ = session->ready_epoch_;
    session->shared_memory_socket_ = session->ready_socket_;
    return session;
  }
  if (session->ended_) return session->end_status_;
  return absl::DeadlineExceededError(
      absl::StrCat("raw Join of rank ", join.rank(), " of job ", join.job(),
                   ": not ready within ", absl::FormatDuration(timeout)));
}

RawSession::~RawSession() {
  join_context_.TryCancel();
  if (event_thread_.joinable()) event_thread_.join();
}

void RawSession::ReadEvents() {
  v1::JoinEvent event;
  while (join_reader_->Read(&event)) {
    absl::MutexLock lock(&mu_);
    if (event.has_ready()) {
      ready_ = true;
      ready_epoch_ = event.ready().epoch();
      ready_socket_ = event.ready().shared_memory_socket();
    }
  }
  const grpc::Status status = join_reader_->Finish();
  absl::MutexLock lock(&mu_);
  ended_ = true;
  end_status_ = status.ok() ? absl::UnavailableError("Join stream ended")
                            : FromGrpc(status);
}

v1::CollectiveHeader RawSession::Header(v1::CollectiveKind kind) const {
  v1::CollectiveHeader header;
  header.set_job(job_);
  header.set_epoch(epoch_);
  header.set_session_id(session_id_);
  header.set_rank(rank_);
  if (ranks_.size() > 1) {
    for (int rank : ranks_) header.add_ranks(rank);
  }
  header.set_sequence(0);
  header.set_kind(kind);
  header.set_timeout_ms(10000);
  header.set_attempt_id(RandomId());
  return header;
}

v1::CollectiveRequest RawSession::AllReduceRequest(
    const std::vector<int64_t>& shape) const {
  v1::CollectiveRequest request;
  *request.mutable_header() = Header(v1::COLLECTIVE_KIND_ALL_REDUCE);
  v1::TensorSpec* spec = request.mutable_header()->add_tensors();
  spec->set_dtype(v1::DATA_TYPE_FLOAT32);
  spec->set_op(v1::REDUCE_OP_SUM);
  for (int64_t d : shape) spec->add_shape(d);
  return request;
}

RawCallResult RawSession::Call(
    const std::vector<v1::CollectiveRequest>& requests, absl::Duration timeout,
    bool half_close, bool many_calls) {
  RawCallResult result;
  const absl::Time start = absl::Now();
  // A channel per call: a stream the server kills for an oversized message
  // must not take the session's connection with it.
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target_, grpc::InsecureChannelCredentials(), RawChannelArguments());
  std::unique_ptr<v1::Reducer::Stub> stub = v1::Reducer::NewStub(channel);
  grpc::ClientContext context;
  Authorize(&context);
  context.set_deadline(absl::ToChronoTime(start + timeout));
  std::unique_ptr<grpc::ClientReaderWriter<v1::CollectiveRequest,
                                           v1::CollectiveResponse>>
      stream = many_calls ? stub->Collectives(&context)
                          : stub->Collective(&context);
  result.all_written = true;
  for (const v1::CollectiveRequest& request : requests) {
    if (!stream->Write(request)) {
      result.all_written = false;
      break;
    }
  }
  if (half_close && result.all_written) stream->WritesDone();
  v1::CollectiveResponse response;
  while (stream->Read(&response)) {
    result.data += response.data();
    result.responses.push_back(response);
  }
  result.status = FromGrpc(stream->Finish());
  result.elapsed = absl::Now() - start;
  return result;
}

absl::Status RawSession::Leave() {
  grpc::ClientContext context;
  Authorize(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::LeaveRequest request;
  request.set_job(job_);
  request.set_session_id(session_id_);
  v1::LeaveResponse response;
  return FromGrpc(stub_->Leave(&context, request, &response));
}

}  // namespace testing
}  // namespace reducer

// RawSession: one rank of a job driven through the generated gRPC stubs of
// reducer.proto, without the client library, so that a test can send what
// the library never would: hand-made CollectiveRequest messages with wrong
// sizes, unknown enum values, out-of-order chunks, oversized messages.
//
//   absl::StatusOr<std::unique_ptr<RawSession>> raw =
//       RawSession::Join(server->address(), "job", /*rank=*/1,
//                        /*world_size=*/2, absl::Seconds(30));
//   v1::CollectiveRequest first;
//   *first.mutable_header() = (*raw)->Header(v1::COLLECTIVE_KIND_ALL_REDUCE);
//   first.set_data(std::string(20, '\0'));
//   RawCallResult r = (*raw)->Call({first}, absl::Seconds(10));
//   // r.status: the server's status for this stream.
//
// The session lives as long as the object: destroying it cancels the Join
// stream, so reducerd sees the rank lost (unless Leave() was called first).
//
// Thread-safe: Call may run on several threads at once.
#ifndef REDUCER_TESTS_RAW_CLIENT_H_
#define REDUCER_TESTS_RAW_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"

namespace reducer {
namespace testing {

// What one Collective stream came to.
struct RawCallResult {
  absl::Status status;  // the stream's final status
  std::vector<v1::CollectiveResponse> responses;
  std::string data;     // the responses' data, concatenated in arrival order
  bool all_written = false;  // every request was accepted by the transport
  absl::Duration elapsed;
};

// The JoinRequest a RawSession sends: `job`, `rank`, `world_size`,
// `session_id`, nothing else.
v1::JoinRequest JoinRequestFor(const std::string& job, int rank, int world_size,
                               const std::string& session_id);

class RawSession {
 public:
  // Opens a session for `rank` of `job` and waits for JobReady (all ranks
  // joined) until `timeout`. The Join stream's error, or DEADLINE_EXCEEDED.
  // A nonempty `token` goes with every call (`authorization: Bearer`).
  static absl::StatusOr<std::unique_ptr<RawSession>> Join(
      const std::string& target, const std::string& job, int rank,
      int world_size, absl::Duration timeout, const std::string& token = "");
  // As Join, for a session that holds several ranks (JoinRequest.ranks, as
  // a relay's does): `ranks` sorted, rank() their first.
  static absl::StatusOr<std::unique_ptr<RawSession>> JoinRanks(
      const std::string& target, const std::string& job,
      const std::vector<int>& ranks, int world_size, absl::Duration timeout,
      const std::string& token = "");

  ~RawSession();
  RawSession(const RawSession&) = delete;
  RawSession& operator=(const RawSession&) = delete;

  // A header as the client library would fill it for this rank's next
  // collective of `kind` on the whole world (group empty, sequence 0,
  // timeout 10 s, a fresh attempt id, and for a session of several ranks
  // all of them in `ranks`); tests then break what they need.
  v1::CollectiveHeader Header(v1::CollectiveKind kind) const;

  // The first request of this rank's next float32 SUM all-reduce of one
  // tensor of `shape`: Header(ALL_REDUCE) and the tensor's spec, no data;
  // tests set the sequence, call id, offset and data, or break what they
  // need.
  v1::CollectiveRequest AllReduceRequest(const std::vector<int64_t>& shape) const;

  // Runs one Collective stream on a channel of its own: writes `requests`
  // in order, half-closes unless `half_close` is false, reads every
  // response, and returns the final status. Writes stop at the first one
  // the transport refuses (the call is over then).
  // With `many_calls`, the stream is a Collectives stream instead (each
  // request one whole call, answers tagged with call ids).
  RawCallResult Call(const std::vector<v1::CollectiveRequest>& requests,
                     absl::Duration timeout, bool half_close = true,
                     bool many_calls = false);

  // Says this session leaves on purpose (Leave RPC).
  absl::Status Leave();

  uint64_t epoch() const { return epoch_; }
  // JobReady.shared_memory_socket: where reducerd offers the same-host path.
  const std::string& shared_memory_socket() const {
    return shared_memory_socket_;
  }
  const std::string& session_id() const { return session_id_; }
  const std::string& job() const { return job_; }
  int rank() const { return rank_; }

 private:
  RawSession(std::string target, std::string job, std::vector<int> ranks,
             std::string token);
  // Opens the session with `request` and waits as Join says.
  static absl::StatusOr<std::unique_ptr<RawSession>> JoinWith(
      const std::string& target, const v1::JoinRequest& request,
      absl::Duration timeout, const std::string& token);
  // Adds the token's metadata to `context`, if there is a token.
  void Authorize(grpc::ClientContext* context) const;
  void ReadEvents();

  // Constant after Join.
  const std::string target_;
  const std::string job_;
  const int rank_;
  const std::vector<int> ranks_;  // the session's, rank_ first
  const std::string token_;
  const std::string session_id_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reducer::Stub> stub_;
  grpc::ClientContext join_context_;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> join_reader_;
  uint64_t epoch_ = 0;
  std::string shared_memory_socket_;
  std::thread event_thread_;

  absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  uint64_t ready_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string ready_socket_ ABSL_GUARDED_BY(mu_);
};

// Channel arguments of the raw client: no message size limits on either
// side (so that oversized messages reach the server), a connection of its
// own per channel.
grpc::ChannelArguments RawChannelArguments();

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_RAW_CLIENT_H_

// ClientUpstream: a relay's Upstream (server/relay/upstream.h) over the
// client library: each session is a ClientSession holding the ranks of the
// relay's host (ClientSession::OpenForRanks), and each call a forwarded
// contribution (ClientSession::StartForwarded) whose payload is read as
// the relay marks it ready. The one place reducerd links the client
// library: what a client of the shards needs (their addresses, TLS, the
// job's token) is the relay's --upstream flags.
#ifndef REDUCER_SERVER_RELAY_CLIENT_CLIENT_UPSTREAM_H_
#define REDUCER_SERVER_RELAY_CLIENT_CLIENT_UPSTREAM_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "server/relay/joinable_threads.h"
#include "server/relay/upstream.h"

namespace reducer {

class ClientUpstream final : public Upstream {
 public:
  // `options`: as a client of the shards sets them (target: the shards;
  // TLS; token; timeout for Connect); job, rank and world size are each
  // session's.
  explicit ClientUpstream(ClientOptions options);
  // Waits for the sessions let go of on their own threads to end (their
  // sessions must all have been let go of).
  ~ClientUpstream() override;

  absl::StatusOr<std::unique_ptr<UpstreamSession>> Open(
      const std::string& job, int world_size, const std::vector<int>& ranks,
      std::function<bool()> given_up,
      std::function<void(const absl::Status&)> ended) override;

 private:
  const ClientOptions options_;
  // Ends the sessions let go of on their own threads.
  const std::shared_ptr<JoinableThreads> enders_;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_CLIENT_CLIENT_UPSTREAM_H_

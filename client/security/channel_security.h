// ChannelSecurity: what a client's channels carry for transport security:
// plaintext or TLS credentials (with the worker's certificate for mutual
// TLS) from ClientOptions::tls, and the job's bearer token from
// ClientOptions::token, added to every call as `authorization: Bearer TOKEN`
// metadata (per call rather than as call credentials, which gRPC drops on
// plaintext channels).
//
//   absl::StatusOr<ChannelSecurity> security = ChannelSecurity::Create(options);
//   std::shared_ptr<grpc::Channel> channel = security->NewChannel(target, args);
//
// Thread-safe after Create. Internal to the client library.
#ifndef REDUCER_CLIENT_SECURITY_CHANNEL_SECURITY_H_
#define REDUCER_CLIENT_SECURITY_CHANNEL_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "grpcpp/grpcpp.h"

namespace reducer {

class ChannelSecurity {
 public:
  // INVALID_ARGUMENT naming the ClientOptions field and file when a TLS
  // file cannot be read or holds no PEM of the right kind, or a certificate
  // comes without its key (or the other way round).
  static absl::StatusOr<ChannelSecurity> Create(const ClientOptions& options);

  // A channel to `target` with `args`, these credentials and the token.
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& target,
                                            grpc::ChannelArguments args) const;

 private:
  ChannelSecurity() = default;

  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string server_name_;     // TLS name override; empty: the target's host
  std::string authorization_;   // "Bearer TOKEN"; empty: no token
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_SECURITY_CHANNEL_SECURITY_H_

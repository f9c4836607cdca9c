// Server transport credentials: plaintext, TLS, or mutual TLS, from
// reducerd's --tls_* flags (ServerOptions). Certificates come through gRPC's
// file-watching provider, so a certificate or CA file replaced on disk (a
// Kubernetes Secret swapped by symlink) is used by new connections within
// the refresh interval, while established ones go on.
//
//   absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
//       MakeServerCredentials(options);
//   builder.AddListeningPort(options.listen, *creds, &port);
//
// Thread-compatible (a function of its arguments).
#ifndef REDUCER_SERVER_SECURITY_SERVER_CREDENTIALS_H_
#define REDUCER_SERVER_SECURITY_SERVER_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/server_options.h"

namespace reducer {

// Insecure credentials when options.tls_cert_file is empty; else TLS with
// that certificate and options.tls_key_file, requiring and verifying client
// certificates signed by options.tls_client_ca_file when it is set.
// INVALID_ARGUMENT naming the flag and file when a file is missing, is not
// PEM of the right kind, the key does not belong to the certificate, or
// the flags are inconsistent (a key without a certificate, a client CA
// without TLS).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

}  // namespace reducer

#endif  // REDUCER_SERVER_SECURITY_SERVER_CREDENTIALS_H_

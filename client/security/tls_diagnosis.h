// DiagnoseTls: why a client's connection to reducerd keeps failing, when
// the reason is its TLS settings. gRPC reports every handshake failure as a
// terse UNAVAILABLE; this opens one connection of its own with OpenSSL,
// looks at what reducerd answers, and names the mismatch and its fix:
//
//   plaintext client, TLS reducerd      "reducerd at H:P serves TLS, ..."
//   TLS client, plaintext reducerd      "reducerd at H:P does not speak TLS, ..."
//   untrusted server certificate        "... tls.ca_file=F does not trust: <why>"
//   name mismatch                       "... certificate names [a, b], not N"
//   client certificate refused          "reducerd at H:P refused ...: <alert>"
//
// Thread-safe (no shared state). Internal to the client library.
#ifndef REDUCER_CLIENT_SECURITY_TLS_DIAGNOSIS_H_
#define REDUCER_CLIENT_SECURITY_TLS_DIAGNOSIS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client_options.h"

namespace reducer {

// FAILED_PRECONDITION with one of the messages above when a probe of
// `target` shows that `tls` (unset: plaintext) cannot work against it. OK
// when it finds no such mismatch: nothing listens yet, the target is not a
// TCP host:port, or the handshake the probe saw was fine. Blocks for at
// most about 2 x `timeout`.
absl::Status DiagnoseTls(const std::string& target,
                         const std::optional<TlsOptions>& tls,
                         absl::Duration timeout);

}  // namespace reducer

#endif  // REDUCER_CLIENT_SECURITY_TLS_DIAGNOSIS_H_

// Protected mode: reducerd refuses to serve a --listen address that other
// hosts can reach unless its callers are authenticated (TLS or job tokens)
// or the operator said, with --allow_unauthenticated, that anyone who can
// reach the port may use it.
//
//   ListenSecurity security;  // no TLS, no tokens, no --allow_unauthenticated
//   absl::Status s = CheckListenExposure("0.0.0.0:50051", security);
//   // FAILED_PRECONDITION naming --listen and the three ways out.
//
// Pure functions of their arguments: nothing is resolved or bound.
#ifndef REDUCER_SERVER_LISTEN_EXPOSURE_H_
#define REDUCER_SERVER_LISTEN_EXPOSURE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace reducer {

// True when `listen`, a gRPC server address in --listen's form, can be
// reached from this host only: an IPv4 address in 127.0.0.0/8, the IPv6
// loopback [::1] (or an IPv4-mapped 127.x address), the name `localhost`,
// or a Unix socket (`unix:` or `unix-abstract:`), each with or without a
// port. Everything else is false: wildcards (0.0.0.0, [::], an empty
// host), other addresses, and any other host name, which could resolve to
// anything.
bool IsLoopbackListenAddress(absl::string_view listen);

// How the main gRPC port authenticates its callers.
struct ListenSecurity {
  bool tls = false;                    // --tls_cert_file given
  bool job_tokens = false;             // --job_tokens_file given
  bool allow_unauthenticated = false;  // --allow_unauthenticated given
};

// OK when `listen` is a loopback address (IsLoopbackListenAddress) or any
// of `security`'s fields is true. Otherwise FAILED_PRECONDITION, one line
// naming --listen's value, saying that reducerd has neither TLS nor job
// tokens, and naming the three ways out: --tls_cert_file/--tls_key_file,
// --job_tokens_file, or --allow_unauthenticated.
absl::Status CheckListenExposure(absl::string_view listen,
                                 const ListenSecurity& security);

}  // namespace reducer

#endif  // REDUCER_SERVER_LISTEN_EXPOSURE_H_

#include "server/listen_exposure.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace reducer {
namespace {

bool ParsesAsIpv6(absl::string_view text) {
  in6_addr address;
  return inet_pton(AF_INET6, std::string(text).c_str(), &address) == 1;
}

// The host of "HOST:PORT", "[IPV6]:PORT", "[IPV6]", a bare IPv6 address or
// a bare HOST.
absl::string_view HostOf(absl::string_view listen) {
  if (absl::ConsumePrefix(&listen, "[")) {
    return listen.substr(0, listen.find(']'));
  }
  // Colons of its own and no brackets: an IPv6 address, with or without a
  // port after it.
  if (listen.find(':') != listen.rfind(':') && ParsesAsIpv6(listen)) {
    return listen;
  }
  const size_t colon = listen.rfind(':');
  return colon == absl::string_view::npos ? listen : listen.substr(0, colon);
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) ||
           (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

bool IsLoopbackListenAddress(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") ||
      absl::StartsWith(listen, "unix-abstract:")) {
    return true;
  }
  return IsLoopbackHost(HostOf(listen));
}

absl::Status CheckListenExposure(absl::string_view listen,
                                 const ListenSecurity& security) {
  if (security.tls || security.job_tokens || security.allow_unauthenticated ||
      IsLoopbackListenAddress(listen)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--listen=", listen,
      " can be reached from other hosts, and reducerd has neither TLS nor "
      "job tokens: anyone who can reach the port could join any job and "
      "read its tensors. Give --tls_cert_file/--tls_key_file, or "
      "--job_tokens_file, or --allow_unauthenticated to serve anyone who "
      "can reach the port (or listen on 127.0.0.1)"));
}

}  // namespace reducer

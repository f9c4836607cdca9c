// Protected mode (server/listen_exposure.h): which --listen addresses are
// loopback, and that a reachable one is served only with TLS, job tokens
// or --allow_unauthenticated.
#include "server/listen_exposure.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

const std::vector<std::string> kLoopback = {
    "127.0.0.1:50051",  "127.0.0.1:0",       "127.1.2.3:50051",
    "127.255.255.255:1", "[::1]:50051",      "[::1]:0",
    "::1",               "[::ffff:127.0.0.1]:50051",
    "localhost:50051",   "LOCALHOST:50051",  "localhost",
    "unix:/run/reducer/reducerd.sock",       "unix:///tmp/r.sock",
    "unix-abstract:reducerd",
};

const std::vector<std::string> kReachable = {
    "0.0.0.0:50051",      "0.0.0.0:0",         "[::]:50051",
    "[::]:0",             "::",                ":50051",
    "192.168.1.20:50051", "10.77.0.2:50051",   "[fe80::1]:50051",
    "[::ffff:10.0.0.1]:50051",                 "reducer-0.reducer:50051",
    "localhost.example.com:50051",             "128.0.0.1:50051",
    "vsock:3:50051",
};

ListenSecurity None() { return ListenSecurity(); }
ListenSecurity Tls() {
  ListenSecurity s;
  s.tls = true;
  return s;
}
ListenSecurity Tokens() {
  ListenSecurity s;
  s.job_tokens = true;
  return s;
}
ListenSecurity AllowUnauthenticated() {
  ListenSecurity s;
  s.allow_unauthenticated = true;
  return s;
}

// Each setting that makes a reachable address safe to serve.
std::vector<ListenSecurity> Secured() {
  return {Tls(), Tokens(), AllowUnauthenticated()};
}

TEST(IsLoopbackListenAddressTest, LoopbackAndUnixSockets) {
  for (const std::string& listen : kLoopback) {
    EXPECT_TRUE(IsLoopbackListenAddress(listen)) << listen;
  }
}

TEST(IsLoopbackListenAddressTest, WildcardsOtherAddressesAndNames) {
  for (const std::string& listen : kReachable) {
    EXPECT_FALSE(IsLoopbackListenAddress(listen)) << listen;
  }
}

TEST(CheckListenExposureTest, LoopbackNeedsNothing) {
  for (const std::string& listen : kLoopback) {
    EXPECT_THAT(CheckListenExposure(listen, None()), IsOk()) << listen;
    for (const ListenSecurity& security : Secured()) {
      EXPECT_THAT(CheckListenExposure(listen, security), IsOk()) << listen;
    }
  }
}

TEST(CheckListenExposureTest, ReachableServedWithTlsTokensOrTheFlag) {
  for (const std::string& listen : kReachable) {
    for (const ListenSecurity& security : Secured()) {
      EXPECT_THAT(CheckListenExposure(listen, security), IsOk()) << listen;
    }
  }
}

TEST(CheckListenExposureTest, ReachableWithNothingIsRefused) {
  for (const std::string& listen : kReachable) {
    EXPECT_THAT(CheckListenExposure(listen, None()),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("--listen=" + listen + " ")))
        << listen;
  }
}

TEST(CheckListenExposureTest, RefusalNamesTheAddressAndTheWaysOut) {
  const absl::Status refused = CheckListenExposure("0.0.0.0:50051", None());
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("--listen=0.0.0.0:50051"),
                             HasSubstr("neither TLS nor job tokens"),
                             HasSubstr("--tls_cert_file/--tls_key_file"),
                             HasSubstr("--job_tokens_file"),
                             HasSubstr("--allow_unauthenticated to serve "
                                       "anyone who can reach the port"),
                             Not(HasSubstr("\n")))));
}

}  // namespace
}  // namespace reducer

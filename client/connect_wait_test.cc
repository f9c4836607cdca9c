// Client::Connect to an address where nothing listens: the client says on
// stderr, once, whom it waits for, and fails at its timeout naming it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

// A port on 127.0.0.1 bound and not listening: connecting is refused.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ConnectWaitTest, SaysWhomItWaitsForOnceThenFailsNamingIt) {
  RefusingPort refusing;
  ASSERT_NE(refusing.port(), 0);
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", refusing.port());
  options.job = "waiting";
  options.rank = 1;
  options.world_size = 2;
  options.timeout = absl::Seconds(4);
  options.shared_memory = SharedMemory::kOff;

  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  const std::string err = ::testing::internal::GetCapturedStderr();

  EXPECT_THAT(client.status(), StatusIs(absl::StatusCode::kUnavailable,
                                        HasSubstr(options.target)));
  // After half the 4 s timeout, naming the rank, the job and the address.
  EXPECT_THAT(err, HasSubstr("reducer: rank 1 of job waiting has waited "));
  EXPECT_THAT(err, HasSubstr(absl::StrCat(
                       " of 4s for reducerd at ", options.target,
                       " (is it running, and is the address right?)\n")));
  // Once.
  EXPECT_EQ(err.find("has waited"), err.rfind("has waited")) << err;
}

}  // namespace
}  // namespace reducer

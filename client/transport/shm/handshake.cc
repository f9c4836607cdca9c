#include "client/transport/shm/handshake.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/shm/fd_passing.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// Bytes of the result segment's start that hold reducerd's nonce.
constexpr size_t kResultNonceBytes = ControlSegment::kNonceBytes;
constexpr size_t kMaxWelcomeBytes = 16 << 10;

absl::StatusOr<UniqueFd> ConnectAbstract(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reducerd named a shared-memory socket of ", name.size(),
                     " bytes; at most ", sizeof(addr.sun_path) - 1, " fit"));
  }
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // abstract
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return absl::InternalError(absl::StrCat("socket(AF_UNIX, SOCK_SEQPACKET): ",
                                            std::strerror(errno)));
  }
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int r;
  do {
    r = ::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), len);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach reducerd's shared-memory socket @", name,
                     " (", std::strerror(errno),
                     "): reducerd runs on another host or in another "
                     "network namespace"));
  }
  return sock;
}

std::optional<SharedMemory> ParseSharedMemory(const char* value) {
  if (value == nullptr) return std::nullopt;
  const std::string v(value);
  if (v == "off") return SharedMemory::kOff;
  if (v == "auto") return SharedMemory::kAuto;
  if (v == "required") return SharedMemory::kRequired;
  return std::nullopt;
}

}  // namespace

SharedMemory SharedMemoryFromEnvironment(SharedMemory option) {
  static const std::optional<SharedMemory> forced =
      ParseSharedMemory(std::getenv("REDUCER_SHARED_MEMORY"));
  return forced.value_or(option);
}

absl::StatusOr<SharedMemoryChannel> ShakeHands(const std::string& socket_name,
                                               v1::SharedMemoryHello hello,
                                               size_t input_bytes,
                                               absl::Time deadline) {
  SharedMemoryChannel channel;
  const std::string nonce = RandomBytes(ControlSegment::kNonceBytes);
  REDUCER_ASSIGN_OR_RETURN(channel.control, ControlSegment::Create(nonce));
  REDUCER_ASSIGN_OR_RETURN(SharedSegment input,
                           SharedSegment::Create("reducer-input", input_bytes));
  channel.input = std::make_unique<SharedSegment>(std::move(input));

  REDUCER_ASSIGN_OR_RETURN(channel.socket, ConnectAbstract(socket_name));
  hello.set_nonce(nonce);
  const int fds[] = {channel.control->fd(), channel.input->fd()};
  // reducerd may refuse before reading the hello (too many handshakes at
  // once), and close: the send then fails, but its refusal is still there to
  // read, and says more than the send's error.
  const absl::Status sent =
      SendWithFds(channel.socket.get(), hello.SerializeAsString(), fds);
  absl::StatusOr<Received> answer = ReceiveWithFds(
      channel.socket.get(), kMaxWelcomeBytes, /*max_fds=*/1,
      sent.ok() ? deadline
                : std::min(deadline, absl::Now() + absl::Seconds(1)));
  if (!answer.ok() && !sent.ok()) return sent;
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        absl::StrCat("no answer from reducerd's shared-memory "
                                     "socket: ",
                                     answer.status().message()));
  }
  v1::SharedMemoryWelcome welcome;
  if (!welcome.ParseFromString(answer->bytes)) {
    return absl::DataLossError(
        "reducerd's shared-memory welcome does not parse");
  }
  if (welcome.status().code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(welcome.status().code()),
                        absl::StrCat("reducerd refused the same-host path: ",
                                     welcome.status().message()));
  }
  if (answer->fds.size() != 1) {
    return absl::DataLossError(absl::StrCat(
        "reducerd's shared-memory welcome carried ", answer->fds.size(),
        " descriptors; the result segment is one"));
  }
  REDUCER_ASSIGN_OR_RETURN(
      SharedSegment result,
      SharedSegment::Adopt(answer->fds[0].release(),
                           SharedSegment::Access::kReadOnly));
  channel.result = std::make_unique<SharedSegment>(std::move(result));
  if (welcome.nonce().size() != kResultNonceBytes ||
      channel.result->size() < kResultNonceBytes ||
      std::memcmp(channel.result->data(), welcome.nonce().data(),
                  kResultNonceBytes) != 0) {
    return absl::DataLossError(
        "the result segment reducerd sent does not hold the nonce it named: "
        "this process does not map the same memory as reducerd");
  }
  return channel;
}

}  // namespace reducer

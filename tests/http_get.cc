#include "tests/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {

absl::StatusOr<std::string> HttpGet(int port, const std::string& path,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = ConnectLoopback(port);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    return absl::UnavailableError(
        absl::StrCat("GET 127.0.0.1:", port, path, ": connect: ", why));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port,
                   "\r\nConnection: close\r\n\r\n");
  size_t written = 0;
  while (written < request.size()) {
    ssize_t n = write(fd, request.data() + written, request.size() - written);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("GET ", path, ": write failed"));
    }
    written += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[8192];
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat(
          "GET 127.0.0.1:", port, path, ": no full answer within ",
          absl::FormatDuration(timeout)));
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", path, ": no HTTP header in: ", response));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GET ", path, ": ", status_line, "\n", response.substr(header_end + 4)));
  }
  return response.substr(header_end + 4);
}

std::string UrlEncode(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  return out;
}

std::string Sample::Series() const {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), "}");
}

absl::StatusOr<std::vector<Sample>> ParseExposition(absl::string_view text) {
  std::vector<Sample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("exposition line '", line, "': ", why));
    };
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == absl::string_view::npos || eq + 1 >= line.size() ||
            line[eq + 1] != '"') {
          return bad("label without =\"value\"");
        }
        const std::string key(line.substr(i, eq - i));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value.push_back(line[j]);
        }
        if (j >= line.size()) return bad("unterminated label value");
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("no closing brace");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return bad("no value");
    absl::string_view value = line.substr(i + 1);
    value = value.substr(0, value.find(' '));  // a timestamp may follow
    if (value == "Nan" || value == "NaN") {
      s.value = std::nan("");
    } else if (!absl::SimpleAtod(value, &s.value)) {
      return bad("value is not a number");
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<double> ScrapeSum(
    int port, absl::string_view name,
    const std::function<bool(const Sample&)>& keep) {
  absl::StatusOr<std::string> body = HttpGet(port, "/metrics");
  if (!body.ok()) return body.status();
  absl::StatusOr<std::vector<Sample>> samples = ParseExposition(*body);
  if (!samples.ok()) return samples.status();
  double total = 0;
  for (const Sample& s : *samples) {
    if (s.name == name && (keep == nullptr || keep(s))) total += s.value;
  }
  return total;
}

}  // namespace testing
}  // namespace reducer

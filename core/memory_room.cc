#include "core/memory_room.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/unique_fd.h"

namespace reducer {
namespace {

constexpr size_t kMaxFileBytes = 64 << 10;

// The file's text, nullopt if it does not exist.
absl::StatusOr<std::optional<std::string>> ReadIfPresent(
    const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::optional<std::string>();
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  std::string text;
  char buf[4096];
  while (text.size() < kMaxFileBytes) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InternalError(
          absl::StrCat("cannot read ", path, ": ", strerror(errno)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(text));
}

absl::StatusOr<uint64_t> ParseCount(const std::string& path,
                                    absl::string_view text) {
  uint64_t value;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InternalError(absl::StrCat("cannot parse ", path, ": \"",
                                            absl::StripAsciiWhitespace(text),
                                            "\" is not a byte count"));
  }
  return value;
}

absl::Status CheckCgroup(size_t bytes, const MemorySources& sources) {
  auto max_text = ReadIfPresent(sources.cgroup_max);
  if (!max_text.ok()) return max_text.status();
  auto current_text = ReadIfPresent(sources.cgroup_current);
  if (!current_text.ok()) return current_text.status();
  if (!max_text->has_value() || !current_text->has_value()) {
    return absl::OkStatus();
  }
  if (absl::StripAsciiWhitespace(**max_text) == "max") return absl::OkStatus();
  auto max = ParseCount(sources.cgroup_max, **max_text);
  if (!max.ok()) return max.status();
  auto current = ParseCount(sources.cgroup_current, **current_text);
  if (!current.ok()) return current.status();
  uint64_t room = *max > *current ? *max - *current : 0;
  if (bytes <= room) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a shared segment of ", bytes,
      " bytes does not fit in the memory cgroup: ", sources.cgroup_max, " is ",
      *max, " and ", sources.cgroup_current, " is ", *current, ", leaving ",
      room, " bytes"));
}

absl::Status CheckMeminfo(size_t bytes, const MemorySources& sources) {
  auto text = ReadIfPresent(sources.meminfo);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return absl::OkStatus();
  for (absl::string_view line : absl::StrSplit(**text, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return absl::InternalError(absl::StrCat("cannot parse ", sources.meminfo,
                                              ": \"MemAvailable:", line,
                                              "\" is not a count of kB"));
    }
    uint64_t available = kib * 1024;
    if (bytes <= available) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "a shared segment of ", bytes,
        " bytes does not fit in memory: ", sources.meminfo,
        " says MemAvailable is ", kib, " kB (", available, " bytes)"));
  }
  // Kernels before 3.14 have no MemAvailable: nothing to check against.
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckMemoryRoom(size_t bytes, const MemorySources& sources) {
  if (absl::Status s = CheckCgroup(bytes, sources); !s.ok()) return s;
  return CheckMeminfo(bytes, sources);
}

}  // namespace reducer

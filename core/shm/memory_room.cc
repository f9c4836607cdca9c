#include "core/shm/memory_room.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "core/shm/unique_fd.h"

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

// One cgroup's limit, at `dir`; skipped unless both files exist.
absl::Status CheckCgroupAt(size_t bytes, const std::string& dir) {
  std::string max_path = absl::StrCat(dir, "/memory.max");
  std::string current_path = absl::StrCat(dir, "/memory.current");
  REDUCER_ASSIGN_OR_RETURN(std::optional<std::string> max_text,
                           ReadIfPresent(max_path));
  REDUCER_ASSIGN_OR_RETURN(std::optional<std::string> current_text,
                           ReadIfPresent(current_path));
  if (!max_text.has_value() || !current_text.has_value()) {
    return absl::OkStatus();
  }
  if (absl::StripAsciiWhitespace(*max_text) == "max") return absl::OkStatus();
  REDUCER_ASSIGN_OR_RETURN(uint64_t max, ParseCount(max_path, *max_text));
  REDUCER_ASSIGN_OR_RETURN(uint64_t current,
                           ParseCount(current_path, *current_text));
  uint64_t room = max > current ? max - current : 0;
  if (bytes <= room) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a shared segment of ", bytes,
      " bytes does not fit in the memory cgroup: ", max_path, " is ", max,
      " and ", current_path, " is ", current, ", leaving ", room, " bytes"));
}

// The rest of the first line of `text` that starts with `key`, without the
// white space around it; nullopt when no line does.
std::optional<absl::string_view> LineAfter(absl::string_view text,
                                           absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, key)) {
      return absl::StripAsciiWhitespace(line);
    }
  }
  return std::nullopt;
}

// The process's cgroup v2 path below the root ("" for the root itself): the
// "0::" line of `self_cgroup`. The root when the file or the line is missing,
// or the path leads outside the root (a cgroup namespace's "/..").
absl::StatusOr<std::string> OwnCgroup(const MemorySources& sources) {
  REDUCER_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           ReadIfPresent(sources.self_cgroup));
  if (!text.has_value()) return std::string();
  std::optional<absl::string_view> path = LineAfter(*text, "0::");
  if (!path.has_value() || absl::StrContains(*path, "..")) {
    return std::string();
  }
  absl::ConsumeSuffix(&*path, "/");
  return std::string(*path);
}

// Every cgroup from the process's own up to the root: a parent's limit binds
// its children, and its memory.current includes theirs.
absl::Status CheckCgroups(size_t bytes, const MemorySources& sources) {
  REDUCER_ASSIGN_OR_RETURN(std::string path, OwnCgroup(sources));
  while (true) {
    REDUCER_RETURN_IF_ERROR(
        CheckCgroupAt(bytes, absl::StrCat(sources.cgroup_root, path)));
    if (path.empty()) return absl::OkStatus();
    path.resize(path.rfind('/'));
  }
}

absl::Status CheckMeminfo(size_t bytes, const MemorySources& sources) {
  REDUCER_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           ReadIfPresent(sources.meminfo));
  if (!text.has_value()) return absl::OkStatus();
  std::optional<absl::string_view> line = LineAfter(*text, "MemAvailable:");
  // Kernels before 3.14 have no MemAvailable: nothing to check against.
  if (!line.has_value()) return absl::OkStatus();
  uint64_t kib;
  if (!absl::ConsumeSuffix(&*line, "kB") ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*line), &kib)) {
    return absl::InternalError(absl::StrCat("cannot parse ", sources.meminfo,
                                            ": \"MemAvailable:", *line,
                                            "\" is not a count of kB"));
  }
  uint64_t available = kib * 1024;
  if (bytes <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a shared segment of ", bytes,
      " bytes does not fit in memory: ", sources.meminfo,
      " says MemAvailable is ", kib, " kB (", available, " bytes)"));
}

}  // namespace

absl::Status CheckMemoryRoom(size_t bytes, const MemorySources& sources) {
  REDUCER_RETURN_IF_ERROR(CheckCgroups(bytes, sources));
  return CheckMeminfo(bytes, sources);
}

}  // namespace reducer

// Test helper: how much of one of this process's mappings its page tables
// map now (the Rss line of /proc/self/smaps), for tests of when a shared
// segment's pages are faulted in.
//
//   absl::StatusOr<size_t> mapped = MappedBytes(segment.data());
#ifndef REDUCER_CORE_SHM_MAPPED_BYTES_H_
#define REDUCER_CORE_SHM_MAPPED_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace reducer {

// The bytes of the mapping that starts at `start` present in this
// process's page tables; NOT_FOUND when no mapping starts there.
inline absl::StatusOr<size_t> MappedBytes(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  const uint64_t want = reinterpret_cast<uintptr_t>(start);
  bool in_mapping = false;
  std::string line;
  while (std::getline(smaps, line)) {
    // A mapping's header: "7f0c2a000000-7f0c2a100000 rw-s 00000000 ...".
    const size_t dash = line.find('-');
    uint64_t begin = 0;
    if (dash != std::string::npos && line.find(' ') > dash &&
        absl::SimpleHexAtoi(absl::string_view(line).substr(0, dash), &begin)) {
      in_mapping = begin == want;
      continue;
    }
    absl::string_view rest = line;
    if (!in_mapping || !absl::ConsumePrefix(&rest, "Rss:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    size_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, " kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
      return absl::InternalError(absl::StrCat("unreadable smaps line: ", line));
    }
    return kib * 1024;
  }
  return absl::NotFoundError(
      absl::StrCat("no mapping starts at 0x", absl::Hex(want)));
}

}  // namespace reducer

#endif  // REDUCER_CORE_SHM_MAPPED_BYTES_H_

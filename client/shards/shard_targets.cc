#include "client/shards/shard_targets.h"

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

absl::Status Invalid(absl::string_view target, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("ClientOptions.target \"", target, "\": ", why));
}

bool IsDecimal(absl::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Appends `address` with its range (if any) expanded to `out`.
absl::Status ExpandOne(absl::string_view target, absl::string_view address,
                       std::vector<std::string>* out) {
  const size_t open = address.find('{');
  const size_t close = address.find('}');
  if (open == absl::string_view::npos && close == absl::string_view::npos) {
    out->emplace_back(address);
    return absl::OkStatus();
  }
  if (open == absl::string_view::npos || close == absl::string_view::npos ||
      close < open) {
    return Invalid(target, absl::StrCat("unbalanced braces in \"", address, "\""));
  }
  const absl::string_view rest = address.substr(close + 1);
  if (rest.find('{') != absl::string_view::npos ||
      rest.find('}') != absl::string_view::npos) {
    return Invalid(target, absl::StrCat("more than one range in \"", address,
                                        "\"; give each range its own address"));
  }
  const absl::string_view range = address.substr(open + 1, close - open - 1);
  const size_t dots = range.find("..");
  const absl::string_view low = range.substr(0, dots);
  const absl::string_view high =
      dots == absl::string_view::npos ? absl::string_view() : range.substr(dots + 2);
  int64_t a = 0, b = 0;
  if (dots == absl::string_view::npos || !IsDecimal(low) || !IsDecimal(high) ||
      !absl::SimpleAtoi(low, &a) || !absl::SimpleAtoi(high, &b)) {
    return Invalid(target, absl::StrCat("\"{", range, "}\" in \"", address,
                                        "\" is not a range {A..B} of "
                                        "non-negative decimal numbers"));
  }
  if (b < a) {
    return Invalid(target, absl::StrCat("the range {", range, "} in \"",
                                        address, "\" runs backwards"));
  }
  if (b - a + 1 > kMaxShards) {
    return Invalid(target, absl::StrCat("the range {", range, "} names ",
                                        b - a + 1, " shards, more than ",
                                        kMaxShards));
  }
  const absl::string_view prefix = address.substr(0, open);
  // A leading zero pads every number to A's width, as bash does.
  const size_t width = low.size() > 1 && low[0] == '0' ? low.size() : 0;
  for (int64_t i = a; i <= b; ++i) {
    std::string n = absl::StrCat(i);
    if (n.size() < width) n.insert(0, width - n.size(), '0');
    out->push_back(absl::StrCat(prefix, n, rest));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandTargets(absl::string_view target) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(target, ',')) {
    const absl::string_view address = absl::StripAsciiWhitespace(entry);
    if (address.empty()) {
      return Invalid(target, "an empty address (a stray comma?)");
    }
    REDUCER_RETURN_IF_ERROR(ExpandOne(target, address, &out));
    if (static_cast<int>(out.size()) > kMaxShards) {
      return Invalid(target, absl::StrCat("more than ", kMaxShards, " shards"));
    }
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& address : out) {
    if (!seen.insert(address).second) {
      return Invalid(target, absl::StrCat("\"", address,
                                          "\" is named twice; each shard once"));
    }
  }
  return out;
}

}  // namespace reducer

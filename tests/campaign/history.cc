#include "tests/campaign/history.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/campaign/quorum_check.h"

namespace reducer {
namespace testing {
namespace {

std::string JsonEscaped(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// "0,2,3" into {0, 2, 3}; false if a part is not a number.
bool ParseRanks(absl::string_view text, std::vector<int>* ranks) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int rank = 0;
    if (!absl::SimpleAtoi(part, &rank)) return false;
    ranks->push_back(rank);
  }
  return true;
}

// The raw value of "key": in a flat JSON object line, unescaped when it is
// a string. Enough for the worker's own lines.
std::optional<std::string> Field(absl::string_view line, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  size_t at = line.find(quoted);
  if (at == absl::string_view::npos) return std::nullopt;
  at += quoted.size();
  if (at >= line.size()) return std::nullopt;
  if (line[at] != '"') {
    size_t end = line.find_first_of(",}", at);
    if (end == absl::string_view::npos) return std::nullopt;
    return std::string(line.substr(at, end - at));
  }
  std::string value;
  for (size_t i = at + 1; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"') return value;
    if (c == '\\' && i + 1 < line.size()) {
      const char e = line[++i];
      if (e == 'u' && i + 4 < line.size()) {
        int code = 0;
        absl::SimpleHexAtoi(line.substr(i + 1, 4), &code);
        value.push_back(static_cast<char>(code));
        i += 4;
      } else {
        value.push_back(e);
      }
      continue;
    }
    value.push_back(c);
  }
  return std::nullopt;  // cut off
}

std::optional<Operation> ParseLine(absl::string_view line) {
  Operation op;
  std::optional<std::string> job = Field(line, "job"), rank = Field(line, "rank"),
                             gen = Field(line, "gen"), round = Field(line, "round"), step = Field(line, "step"),
                             kind = Field(line, "kind"),
                             elements = Field(line, "elements"),
                             start = Field(line, "start_us"), end = Field(line, "end_us"),
                             timeout = Field(line, "timeout_ms"),
                             code = Field(line, "code"), message = Field(line, "message"),
                             check = Field(line, "check");
  if (!job || !rank || !gen || !round || !step || !kind || !elements || !start || !end ||
      !timeout || !code || !message || !check) {
    return std::nullopt;
  }
  int64_t start_us = 0, end_us = 0;
  if (!absl::SimpleAtoi(*rank, &op.rank) || !absl::SimpleAtoi(*gen, &op.gen) ||
      !absl::SimpleAtoi(*round, &op.round) ||
      !absl::SimpleAtoi(*step, &op.step) || !absl::SimpleAtoi(*elements, &op.elements) ||
      !absl::SimpleAtoi(*start, &start_us) || !absl::SimpleAtoi(*end, &end_us) ||
      !absl::SimpleAtoi(*timeout, &op.timeout_ms)) {
    return std::nullopt;
  }
  op.job = *job;
  op.kind = *kind;
  op.named = Field(line, "named") == "true";
  // The quorum fields are absent from lines of older workers.
  if (std::optional<std::string> ranks = Field(line, "contributors")) {
    if (!ParseRanks(*ranks, &op.contributors)) return std::nullopt;
  }
  if (std::optional<std::string> ranks = Field(line, "joined")) {
    if (!ParseRanks(*ranks, &op.joined)) return std::nullopt;
  }
  op.state = Field(line, "state").value_or("");
  op.start = absl::FromUnixMicros(start_us);
  op.end = absl::FromUnixMicros(end_us);
  op.code = *code;
  op.message = *message;
  op.check = *check;
  return op;
}

// The failure ended (or came from the end of) a session: the rank lost its
// transport or its session, saw the epoch end, or had its retry refused as
// already answered. See Violation::lost_with_shard.
bool SessionEnded(const Operation& failed) {
  return failed.code == "UNAVAILABLE" || failed.code == "ABORTED" ||
         failed.code == "FAILED_PRECONDITION" || failed.code == "CANCELLED";
}

// `failed` names a shard (its address) that was SIGKILLed or restarted
// while it ran, or within `aftermath` before: its result died with it.
bool LostWithItsShard(const Operation& failed,
                      const std::vector<FaultWindow>& faults,
                      absl::Duration aftermath) {
  for (const FaultWindow& f : faults) {
    if (f.kind != "kill_shard" && f.kind != "restart_shard") continue;
    // "shard 0 (10.77.0.2:50051)"
    const size_t open = f.what.find('(');
    const size_t close = f.what.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) {
      continue;
    }
    const std::string address = f.what.substr(open + 1, close - open - 1);
    const bool overlaps = failed.end >= f.start && failed.start <= f.end + aftermath;
    if (overlaps && absl::StrContains(failed.message, address)) return true;
  }
  return false;
}

// `runs` (one collective, some ranks failed) lost exactly the ranks of
// relays SIGKILLed while it ran (or within `aftermath` before): every rank
// of such a relay that ran it failed as a session ends, and every other
// rank succeeded. See Violation::lost_with_shard.
bool LostWithItsRelays(const std::vector<const Operation*>& runs,
                       const std::vector<FaultWindow>& faults,
                       absl::Duration aftermath) {
  for (const Operation* op : runs) {
    bool on_a_killed_relay = false;
    for (const FaultWindow& f : faults) {
      if (f.kind != "kill_relay" || f.job != op->job) continue;
      if (std::find(f.ranks.begin(), f.ranks.end(), op->rank) ==
          f.ranks.end()) {
        continue;
      }
      on_a_killed_relay = op->end >= f.start && op->start <= f.end + aftermath;
      if (on_a_killed_relay) break;
    }
    if (on_a_killed_relay != !op->ok()) return false;
    if (!op->ok() && !SessionEnded(*op)) return false;
  }
  return true;
}

bool NamesACause(absl::string_view message) {
  const std::string m = absl::AsciiStrToLower(message);
  for (absl::string_view cause :
       {"rank ", "shard", "reducerd", "epoch", "deadline", "within", "timed out",
        "timeout"}) {
    if (absl::StrContains(m, cause)) return true;
  }
  return false;
}

}  // namespace

std::string Operation::Describe(absl::Time origin) const {
  return absl::StrFormat("%s rank %d round %d step %d %s (%d elements) [t+%.3fs..t+%.3fs] %s%s%s%s",
                         job, rank, round, step, kind, elements,
                         absl::ToDoubleSeconds(start - origin),
                         absl::ToDoubleSeconds(end - origin), code,
                         message.empty() ? "" : ": ", message,
                         check == "ok" || check == "none" ? "" : absl::StrCat(" [", check, "]"));
}

bool Operation::quorum() const {
  return absl::StartsWith(kind, "quorum") || kind == "handoff";
}

std::string FormatHistoryLine(const Operation& op) {
  return absl::StrFormat(
      "{\"job\":\"%s\",\"rank\":%d,\"gen\":%d,\"round\":%d,\"step\":%d,\"kind\":\"%s\","
      "\"elements\":%d,\"named\":%s,\"start_us\":%d,\"end_us\":%d,"
      "\"timeout_ms\":%d,\"code\":\"%s\",\"message\":\"%s\",\"check\":\"%s\","
      "\"contributors\":\"%s\",\"joined\":\"%s\",\"state\":\"%s\"}\n",
      JsonEscaped(op.job), op.rank, op.gen, op.round, op.step, JsonEscaped(op.kind),
      op.elements, op.named ? "true" : "false", absl::ToUnixMicros(op.start),
      absl::ToUnixMicros(op.end), op.timeout_ms, JsonEscaped(op.code),
      JsonEscaped(op.message), JsonEscaped(op.check), absl::StrJoin(op.contributors, ","),
      absl::StrJoin(op.joined, ","), JsonEscaped(op.state));
}

void AppendHistoryLine(int fd, const Operation& op) {
  if (fd < 0) return;
  const std::string line = FormatHistoryLine(op);
  ssize_t written = write(fd, line.data(), line.size());
  (void)written;
}

std::vector<Operation> ParseHistory(absl::string_view contents) {
  std::vector<Operation> ops;
  for (absl::string_view line : absl::StrSplit(contents, '\n', absl::SkipEmpty())) {
    if (std::optional<Operation> op = ParseLine(line)) ops.push_back(*std::move(op));
  }
  return ops;
}

std::vector<Violation> CheckHistory(const std::vector<Operation>& ops,
                                    const std::vector<FaultWindow>& faults,
                                    const Limits& limits) {
  std::vector<Violation> violations;
  absl::Time origin = absl::InfiniteFuture();
  for (const Operation& op : ops) origin = std::min(origin, op.start);
  for (const FaultWindow& f : faults) origin = std::min(origin, f.start);

  // Results, buffers, deadlines, causes: one operation at a time.
  for (const Operation& op : ops) {
    if (absl::StartsWith(op.check, "bad")) {
      violations.push_back({absl::StrCat("wrong result: ", op.Describe(origin)), op.job,
                            op.start});
    }
    const absl::Duration limit =
        (op.kind == "connect" ? limits.connect_timeout : absl::Milliseconds(op.timeout_ms)) +
        limits.deadline_slack;
    if (op.end - op.start > limit) {
      violations.push_back({absl::StrCat("outlived its deadline (",
                                         absl::FormatDuration(op.end - op.start), " > ",
                                         absl::FormatDuration(limit),
                                         "): ", op.Describe(origin)),
                            op.job, op.start});
    }
    if (op.ok()) continue;
    const FaultWindow* cause = nullptr;
    for (const FaultWindow& f : faults) {
      const bool reaches = f.job.empty() || f.job == op.job;
      const bool overlaps = op.end >= f.start && op.start <= f.end + limits.aftermath;
      if (reaches && overlaps) {
        cause = &f;
        break;
      }
    }
    if (cause == nullptr) {
      violations.push_back({absl::StrCat("failed with no fault that reaches its job active: ",
                                         op.Describe(origin)),
                            op.job, op.start});
    } else if (!NamesACause(op.message)) {
      violations.push_back({absl::StrCat("failure names no cause (active: ", cause->kind,
                                         " of ", cause->what, "): ", op.Describe(origin)),
                            op.job, op.start});
    }
  }

  // Agreement: every collective succeeded on all the ranks that ran it, or
  // failed on all of them.
  std::map<std::tuple<std::string, int64_t, int64_t, std::string>,
           std::vector<const Operation*>>
      collectives;
  for (const Operation& op : ops) {
    if (op.step < 0) continue;  // connect, resync: not one collective
    if (op.quorum()) continue;  // see CheckQuorumSteps
    collectives[{op.job, op.round, op.step, op.kind}].push_back(&op);
  }
  for (const auto& [key, runs] : collectives) {
    const Operation* succeeded = nullptr;
    const Operation* failed = nullptr;
    for (const Operation* op : runs) (op->ok() ? succeeded : failed) = op;
    if (succeeded != nullptr && failed != nullptr) {
      violations.push_back(
          {absl::StrCat("ranks disagree: ", succeeded->Describe(origin),
                        " but ", failed->Describe(origin)),
           succeeded->job, std::min(succeeded->start, failed->start),
           (SessionEnded(*failed) &&
            LostWithItsShard(*failed, faults, limits.aftermath)) ||
               LostWithItsRelays(runs, faults, limits.aftermath)});
    }
  }
  std::vector<Violation> quorum = CheckQuorumSteps(ops, faults, limits);
  violations.insert(violations.end(), quorum.begin(), quorum.end());
  return violations;
}

}  // namespace testing
}  // namespace reducer

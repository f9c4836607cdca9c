#include "server/log.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace reducer {
namespace {

absl::string_view LevelName(LogSeverity severity) {
  return severity == LogSeverity::kInfo      ? "INFO"
         : severity == LogSeverity::kWarning ? "WARN"
                                             : "ERROR";
}

// Appends control character `c` escaped (\n, \r, \t, else `hex_prefix`
// and two hex digits) and returns true; returns false for any other byte.
bool AppendEscapedControl(std::string* out, char c, const char* hex_prefix) {
  const unsigned char u = static_cast<unsigned char>(c);
  switch (c) {
    case '\n': out->append("\\n"); return true;
    case '\r': out->append("\\r"); return true;
    case '\t': out->append("\\t"); return true;
    default:
      if (u >= 0x20 && u != 0x7f) return false;
      static constexpr char kHex[] = "0123456789abcdef";
      out->append(hex_prefix);
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 0xf]);
      return true;
  }
}

// `s` as a JSON string literal. Bytes from 0x80 up pass through as they are
// (job names are UTF-8 in practice); control characters are escaped.
void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (!AppendEscapedControl(out, c, "\\u00")) {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// `s` for a text line: control characters (a newline a client put in a job
// or collective name would forge a line) escaped as \n, \r, \t or \xNN;
// every other byte as it is.
void AppendTextEscaped(std::string* out, absl::string_view s) {
  for (char c : s) {
    if (!AppendEscapedControl(out, c, "\\x")) out->push_back(c);
  }
}

void AppendField(std::string* out, absl::string_view key,
                 absl::string_view value) {
  out->push_back(',');
  AppendJsonString(out, key);
  out->push_back(':');
  AppendJsonString(out, value);
}

void WriteLine(const std::string& line) {
  // A single write keeps lines from different threads whole.
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_format must be text or json, got '", name, "'"));
}

std::string Logger::FormatLine(const LogEvent& event, absl::Time time) const {
  const std::string when =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
  if (format_ == LogFormat::kText) {
    std::string line = absl::StrCat(when, " ", LevelName(event.severity), " ");
    AppendTextEscaped(&line, event.message);
    line.push_back('\n');
    return line;
  }
  std::string out = "{\"time\":";
  AppendJsonString(&out, when);
  AppendField(&out, "level", LevelName(event.severity));
  AppendField(&out, "event", event.event.empty() ? "message" : event.event);
  AppendField(&out, "message", event.message);
  if (!event.job.empty()) AppendField(&out, "job", event.job);
  if (event.epoch.has_value()) absl::StrAppend(&out, ",\"epoch\":", *event.epoch);
  if (!event.collective.empty()) {
    AppendField(&out, "collective", event.collective);
  }
  if (!event.ranks.empty()) {
    absl::StrAppend(&out, ",\"ranks\":[", absl::StrJoin(event.ranks, ","), "]");
  }
  if (!event.tenant.empty()) AppendField(&out, "tenant", event.tenant);
  out.append("}\n");
  return out;
}

Logger::Logger(LogFormat format, LogGate::Clock clock)
    : format_(format),
      clock_(clock),
      gate_(std::make_unique<LogGate>(std::move(clock))) {}

std::vector<std::string> Logger::LinesFor(const LogEvent& event) const {
  const absl::Time now = clock_();
  if (event.tenant.empty()) return {FormatLine(event, now)};
  LogGate::Verdict verdict = gate_->Admit(event.tenant, event.event);
  std::vector<std::string> lines;
  for (const LogGate::Quiet& quiet : verdict.quiet) {
    const std::string message = absl::StrCat(
        quiet.suppressed, " more ", quiet.kind, " lines of tenant ",
        quiet.tenant, " suppressed in the last ",
        absl::StrFormat("%.1fs", absl::ToDoubleSeconds(quiet.over)));
    LogEvent summary;
    summary.severity = LogSeverity::kWarning;
    summary.event = quiet.kind;
    summary.message = message;
    summary.tenant = quiet.tenant;
    lines.push_back(FormatLine(summary, now));
  }
  if (!verdict.pass) return lines;
  if (verdict.suppressed == 0) {
    lines.push_back(FormatLine(event, now));
    return lines;
  }
  const std::string message = absl::StrCat(
      event.message, LogGate::SuppressedNote(verdict.suppressed, verdict.over));
  LogEvent noted = event;
  noted.message = message;
  lines.push_back(FormatLine(noted, now));
  return lines;
}

void Logger::Log(const LogEvent& event) const {
  for (const std::string& line : LinesFor(event)) WriteLine(line);
}

void Log(LogSeverity severity, absl::string_view message) {
  LogEvent event;
  event.severity = severity;
  event.message = message;
  Logger().Log(event);
}

}  // namespace reducer

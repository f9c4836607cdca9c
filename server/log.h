// Server logging to stderr, one line per event.
//
// Text (the default) is "TIME LEVEL MESSAGE", with a UTC timestamp:
//   2026-11-30T08:00:00.123Z WARN allreduce #5 in job j1 timed out ...
// JSON (--log_format=json) is one object per line with the same time, level
// and message, plus the event's name and what it is about:
//   {"time":"2026-11-30T08:00:00.123Z","level":"WARN",
//    "event":"collective_failed","message":"...","job":"j1","epoch":1,
//    "collective":"allreduce #5","ranks":[1]}
// Fields that do not apply to an event (no job, no epoch) are left out.
//
//   Logger log(LogFormat::kJson);
//   log.Log({LogSeverity::kWarning, "epoch_aborted", message, job, epoch});
//
// Events a client can cause at will name their tenant (LogEvent::tenant):
// those go through the logger's LogGate (server/log_gate.h), at most one
// line per second per tenant and event name, the next line let through
// saying how many were held back. Events without a tenant always print.
//
// Thread-safe (one write(2) per line keeps lines whole).
#ifndef REDUCER_SERVER_LOG_H_
#define REDUCER_SERVER_LOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/log_gate.h"

namespace reducer {

enum class LogSeverity { kInfo, kWarning, kError };

enum class LogFormat { kText, kJson };

// "text" or "json"; INVALID_ARGUMENT naming the flag for anything else.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// One event. The views must stay valid for the Log call only.
struct LogEvent {
  LogSeverity severity = LogSeverity::kInfo;
  // A stable, machine-readable name: "job_ready", "collective_failed", ...
  absl::string_view event;
  // The human-readable line, as the text format prints it (control
  // characters escaped, so that one event is always one line).
  absl::string_view message;
  absl::string_view job;                   // empty: not about a job
  std::optional<uint64_t> epoch;           // the job's epoch, when known
  absl::string_view collective;            // e.g. `allreduce "step7"`
  absl::Span<const int> ranks;             // the ranks the event names
  // The tenant (server/security/job_tokens.h's TenantOf) whose client can
  // cause this event at will: set, the event is rate-limited per tenant
  // and event name (see the top of this file), and the JSON line names it.
  absl::string_view tenant;
};

class Logger {
 public:
  // `clock`: what time lines carry and the gate counts by (a test's fake).
  explicit Logger(LogFormat format = LogFormat::kText,
                  LogGate::Clock clock = &absl::Now);

  void Log(const LogEvent& event) const;

  // The lines (each with its newline) that Log writes for `event` now:
  // the event's own line, with the count of those of its tenant and name
  // held back before it, or none when the gate holds it back; first, the
  // summaries of other tenants' held-back lines that are due.
  std::vector<std::string> LinesFor(const LogEvent& event) const;

  // The line (with its newline) that Log writes for `event` at `time`,
  // ungated.
  std::string FormatLine(const LogEvent& event, absl::Time time) const;

  LogFormat format() const { return format_; }

 private:
  const LogFormat format_;
  const LogGate::Clock clock_;
  const std::unique_ptr<LogGate> gate_;
};

// A text-format line with no event fields, for code that has no Logger.
void Log(LogSeverity severity, absl::string_view message);

}  // namespace reducer

#endif  // REDUCER_SERVER_LOG_H_

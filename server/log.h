// Minimal server logging to stderr, one line per call, with a UTC timestamp
// and a severity: "2026-11-30T08:00:00.123Z WARN allreduce #5 in job j1 ...".
// Thread-safe (one write(2) per line).
#ifndef REDUCER_SERVER_LOG_H_
#define REDUCER_SERVER_LOG_H_

#include "absl/strings/string_view.h"

namespace reducer {

enum class LogSeverity { kInfo, kWarning, kError };

void Log(LogSeverity severity, absl::string_view message);

}  // namespace reducer

#endif  // REDUCER_SERVER_LOG_H_

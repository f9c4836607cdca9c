#include "server/log.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace reducer {

void Log(LogSeverity severity, absl::string_view message) {
  absl::string_view level = severity == LogSeverity::kInfo      ? "INFO"
                            : severity == LogSeverity::kWarning ? "WARN"
                                                                : "ERROR";
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      " ", level, " ", message, "\n");
  // A single write keeps lines from different threads whole.
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace reducer

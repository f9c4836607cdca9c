// The step scripts the test workers run (fault_worker, conformance_worker):
// steps separated by ';', each `verb:key=value,key=value`.
//
//   absl::StatusOr<std::vector<Step>> steps =
//       ParseScript("connect;allreduce:shape=4,seed=3;barrier");
//   (*steps)[1].GetInt("seed", 0);  // 3
#ifndef REDUCER_TESTS_WORKER_SCRIPT_H_
#define REDUCER_TESTS_WORKER_SCRIPT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace reducer {
namespace testing {

struct Step {
  std::string verb;
  absl::flat_hash_map<std::string, std::string> args;

  bool Has(const std::string& key) const { return args.contains(key); }
  std::string Get(const std::string& key, const std::string& fallback) const;
  // Exits the worker (status 2) naming the argument when it is not an
  // integer: a script error, not an outcome to report.
  int64_t GetInt(const std::string& key, int64_t fallback) const;
};

// INVALID_ARGUMENT naming the step for an argument without a key.
absl::StatusOr<std::vector<Step>> ParseScript(const std::string& script);

// The steps a worker's main runs: `script` parsed, or nothing when the
// worker was given no --job (`job` empty) or the script does not parse,
// after a line on stderr that starts with `worker`; main then exits 2.
std::optional<std::vector<Step>> MainScript(const char* worker,
                                            const std::string& job,
                                            const std::string& script);

}  // namespace testing
}  // namespace reducer

#endif  // REDUCER_TESTS_WORKER_SCRIPT_H_

#include "tests/worker_script.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace reducer {
namespace testing {

std::string Step::Get(const std::string& key, const std::string& fallback) const {
  auto it = args.find(key);
  return it == args.end() ? fallback : it->second;
}

int64_t Step::GetInt(const std::string& key, int64_t fallback) const {
  auto it = args.find(key);
  int64_t v = fallback;
  if (it != args.end() && !absl::SimpleAtoi(it->second, &v)) {
    std::fprintf(stderr, "worker script: step %s: %s=%s is not an integer\n",
                 verb.c_str(), key.c_str(), it->second.c_str());
    std::exit(2);
  }
  return v;
}

absl::StatusOr<std::vector<Step>> ParseScript(const std::string& script) {
  std::vector<Step> steps;
  for (absl::string_view text : absl::StrSplit(script, ';', absl::SkipEmpty())) {
    Step step;
    std::pair<std::string, std::string> verb_args =
        absl::StrSplit(text, absl::MaxSplits(':', 1));
    step.verb = verb_args.first;
    for (absl::string_view kv :
         absl::StrSplit(verb_args.second, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("bad argument '", kv,
                                                       "' in step '", text, "'"));
      }
      step.args[p.first] = p.second;
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::optional<std::vector<Step>> MainScript(const char* worker,
                                            const std::string& job,
                                            const std::string& script) {
  if (job.empty()) {
    std::fprintf(stderr, "%s: --job is required\n", worker);
    return std::nullopt;
  }
  absl::StatusOr<std::vector<Step>> steps = ParseScript(script);
  if (!steps.ok()) {
    std::fprintf(stderr, "%s: %s\n", worker, steps.status().ToString().c_str());
    return std::nullopt;
  }
  return *std::move(steps);
}

}  // namespace testing
}  // namespace reducer

#include "tests/fault_test_base.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"

namespace reducer {
namespace testing {
namespace {

// Time kept back from the test's limit when waiting for workers, for
// stopping reducerd and reporting.
constexpr absl::Duration kReserve = absl::Seconds(20);

absl::StatusCode CodeFromName(absl::string_view name) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return absl::StatusCode::kUnknown;
}

// Verbs whose results the worker checks against the closed form.
bool IsTensorCollective(absl::string_view verb) {
  for (absl::string_view v : {"allreduce", "allreduce_inplace", "many",
                              "allgather", "broadcast", "broadcast_inplace",
                              "reducescatter", "soak"}) {
    if (verb == v) return true;
  }
  return false;
}

}  // namespace

bool RssChecksApply() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  return true;
#endif
}

absl::flat_hash_map<std::string, StepResult> ParseStepResults(
    const std::string& stdout_text) {
  absl::flat_hash_map<std::string, StepResult> results;
  for (absl::string_view line : absl::StrSplit(stdout_text, '\n')) {
    if (!absl::StartsWith(line, "RESULT ")) continue;
    StepResult r;
    r.found = true;
    const size_t msg = line.find(" msg=");
    r.message = msg == absl::string_view::npos
                    ? std::string()
                    : std::string(line.substr(msg + 5));
    std::vector<std::string> fields =
        absl::StrSplit(line.substr(0, msg), ' ', absl::SkipEmpty());
    if (fields.size() < 6) continue;
    r.index = fields[1];
    r.verb = fields[2];
    for (size_t i = 3; i < fields.size(); ++i) {
      std::pair<std::string, std::string> kv =
          absl::StrSplit(fields[i], absl::MaxSplits('=', 1));
      if (kv.first == "code") r.code = CodeFromName(kv.second);
      if (kv.first == "check") r.check = kv.second;
      if (kv.first == "ms") {
        int64_t ms = 0;
        if (absl::SimpleAtoi(kv.second, &ms)) r.elapsed = absl::Milliseconds(ms);
      }
    }
    results[r.index] = r;
  }
  return results;
}

void FaultTest::SetUp() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  test_name_ = absl::StrCat(info->test_suite_name(), ".", info->name());
  for (char& c : test_name_) {
    if (c == '/') c = '_';
  }
  watchdog_ = std::make_unique<Watchdog>(test_name_, TimeLimit());
  deadline_ = absl::Now() + TimeLimit();
  ASSERT_NO_FATAL_FAILURE(FindRunfile("tests/fault_worker", &worker_binary_));
  scratch_dir_ = absl::StrCat(TestTempDir(), "/", test_name_);
  ASSERT_TRUE(mkdir(scratch_dir_.c_str(), 0755) == 0 || errno == EEXIST)
      << scratch_dir_;
}

void FaultTest::TearDown() {
  if (server_ != nullptr && !server_killed_) {
    EXPECT_EQ(server_->StopDrained(), "")
        << "reducerd must drain and exit 0 on SIGTERM after the faults";
  }
  server_.reset();
  old_servers_.clear();
  watchdog_.reset();
}

bool FaultTest::StartServer(std::vector<std::string> flags) {
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
      ReducerdProcess::Start(flags);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return false;
  server_ = *std::move(server);
  server_flags_ = std::move(flags);
  server_port_ = server_->port();
  server_killed_ = false;
  return true;
}

void FaultTest::KillServer() {
  if (server_ == nullptr) return;
  server_->Kill();
  server_killed_ = true;
}

bool FaultTest::RestartServerOnSamePort() {
  if (server_ != nullptr) old_servers_.push_back(std::move(server_));
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
      ReducerdProcess::StartOnPort(server_port_, server_flags_);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return false;
  server_ = *std::move(server);
  server_killed_ = false;
  return true;
}

std::unique_ptr<ChildProcess> FaultTest::StartWorker(const WorkerSpec& spec) {
  std::string target = spec.target;
  if (target.empty() && server_ != nullptr) target = server_->address();
  std::vector<std::string> argv = spec.command_prefix;
  argv.insert(argv.end(), {
      worker_binary_,
      absl::StrCat("--target=", target),
      absl::StrCat("--job=", spec.job),
      absl::StrCat("--rank=", spec.rank),
      absl::StrCat("--world_size=", spec.world_size),
      absl::StrCat("--scratch_dir=", scratch_dir_),
      absl::StrCat("--steps=", spec.steps),
  });
  argv.insert(argv.end(), spec.extra_flags.begin(), spec.extra_flags.end());
  const std::string name =
      spec.name.empty() ? absl::StrCat(spec.job, ".rank", spec.rank) : spec.name;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(std::move(argv), name);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : nullptr;
}

std::vector<std::unique_ptr<ChildProcess>> FaultTest::StartJob(
    const std::string& job, int world_size,
    const std::vector<std::string>& steps,
    const std::vector<std::string>& targets,
    const std::vector<std::string>& extra_flags) {
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < world_size; ++r) {
    WorkerSpec spec{job, r, world_size,
                    steps.size() == 1 ? steps[0] : steps.at(r)};
    if (!targets.empty()) spec.target = targets.at(r);
    spec.extra_flags = extra_flags;
    workers.push_back(StartWorker(spec));
  }
  return workers;
}

ProcessResult FaultTest::RunToCompletion(std::vector<std::string> argv,
                                         const std::string& name) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(std::move(argv), name);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return ProcessResult();
  return (*child)->Wait(absl::Seconds(30));
}

std::vector<ProcessResult> FaultTest::WaitWorkers(
    const std::vector<std::unique_ptr<ChildProcess>>& workers,
    absl::Duration timeout) {
  std::vector<ProcessResult> results;
  for (const auto& w : workers) {
    if (w == nullptr) {
      ADD_FAILURE() << "a worker failed to start";
      results.resize(workers.size());
      return results;
    }
  }
  const absl::Duration budget =
      std::min(timeout, deadline_ - absl::Now() - kReserve);
  results = WaitAll(workers, std::max(budget, absl::Seconds(1)));
  // Each worker's step results, for the test log.
  for (const ProcessResult& r : results) {
    for (absl::string_view line : absl::StrSplit(r.stdout_text, '\n')) {
      if (absl::StartsWith(line, "RESULT ") || absl::StartsWith(line, "SOAK ")) {
        std::printf("%s: %.*s\n", r.name.c_str(), static_cast<int>(line.size()),
                    line.data());
      }
    }
  }
  std::fflush(stdout);
  bool all_ok = true;
  for (const ProcessResult& r : results) {
    EXPECT_TRUE(r.Succeeded()) << r.Describe();
    all_ok = all_ok && r.Succeeded();
  }
  if (!all_ok && server_ != nullptr) {
    ADD_FAILURE() << "server logs:\n" << server_->Logs();
  }
  return results;
}

void FaultTest::KillLastRankDuringTwoSteps(
    std::vector<std::unique_ptr<ChildProcess>>* workers,
    absl::Duration within) {
  std::vector<std::unique_ptr<ChildProcess>>& w = *workers;
  ASSERT_FALSE(w.empty());
  const size_t last = w.size() - 1;
  for (size_t r = 0; r < last; ++r) {
    ASSERT_NE(w[r], nullptr);
    ASSERT_TRUE(WaitForOutput(*w[r], "BEGIN 1 "));
    ASSERT_TRUE(WaitForOutput(*w[r], "BEGIN 2 "));
  }
  ASSERT_NE(w[last], nullptr);
  ASSERT_TRUE(WaitForOutput(*w[last], "BEGIN 1 hang"));
  absl::SleepFor(absl::Milliseconds(500));  // the others' calls reach reducerd
  const absl::Time killed_at = absl::Now();
  ASSERT_TRUE(w[last]->Signal(SIGKILL));
  const ProcessResult killed = w[last]->Wait(absl::Seconds(10));
  EXPECT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
  for (size_t r = 0; r < last; ++r) {
    ASSERT_TRUE(WaitForOutput(*w[r], "RESULT 1 ", within));
    ASSERT_TRUE(WaitForOutput(*w[r], "RESULT 2 ", within));
  }
  EXPECT_LT(absl::Now() - killed_at, within);
  w.pop_back();
}

void FaultTest::ExpectTwoStepsAbortedNaming(
    const std::vector<std::unique_ptr<ChildProcess>>& workers,
    const std::string& killed, absl::Duration max_elapsed, bool require_check) {
  for (const ProcessResult& r : WaitWorkers(workers)) {
    for (const char* step : {"1", "2"}) {
      SCOPED_TRACE(absl::StrCat(r.name, " step ", step));
      ExpectStep(r, step, absl::StatusCode::kAborted, {killed}, max_elapsed,
                 require_check);
    }
  }
}

void FaultTest::FindRunfile(const std::string& runfile, std::string* path) {
  absl::StatusOr<std::string> found = RunfilePath(runfile);
  ASSERT_TRUE(found.ok()) << found.status();
  *path = *std::move(found);
}

bool FaultTest::WaitForOutput(ChildProcess& worker, const std::string& text,
                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (absl::StrContains(worker.ReadStdout(), text)) return true;
    if (!worker.IsRunning()) {
      return absl::StrContains(worker.ReadStdout(), text);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ADD_FAILURE() << worker.name() << " did not print \"" << text << "\" within "
                << timeout << "; stdout:\n"
                << worker.ReadStdout() << "\nstderr:\n"
                << worker.ReadStderr();
  return false;
}

StepResult FaultTest::Step(const ProcessResult& worker,
                           const std::string& index) {
  absl::flat_hash_map<std::string, StepResult> results =
      ParseStepResults(worker.stdout_text);
  auto it = results.find(index);
  if (it == results.end()) {
    ADD_FAILURE() << worker.name << " reported no result for step " << index
                  << "\n"
                  << worker.Describe();
    return StepResult();
  }
  return it->second;
}

void FaultTest::ExpectStep(const ProcessResult& worker,
                           const std::string& index, absl::StatusCode code,
                           const std::vector<std::string>& substrings,
                           absl::Duration max_elapsed, bool require_check) {
  const StepResult r = Step(worker, index);
  if (!r.found) return;
  std::vector<std::string> problems;
  if (r.code != code) {
    problems.push_back(absl::StrCat("want code ", absl::StatusCodeToString(code)));
  }
  for (const std::string& s : substrings) {
    bool any = false;
    for (absl::string_view alternative : absl::StrSplit(s, " || ")) {
      any = any || absl::StrContains(r.message, alternative);
    }
    if (!any) {
      problems.push_back(absl::StrCat("want the message to contain \"", s, "\""));
    }
  }
  if (r.elapsed > max_elapsed) {
    problems.push_back(absl::StrCat("want it to end within ",
                                    absl::FormatDuration(max_elapsed)));
  }
  if (r.check == "bad") {
    problems.push_back("the worker's check of the result or buffer failed");
  } else if (code == absl::StatusCode::kOk && require_check &&
             IsTensorCollective(r.verb) && r.check != "ok") {
    problems.push_back("want the result checked (check=ok)");
  }
  if (problems.empty()) return;
  ADD_FAILURE() << worker.name << " step " << index << " (" << r.verb
                << "): got " << absl::StatusCodeToString(r.code) << " after "
                << absl::FormatDuration(r.elapsed) << ", check=" << r.check
                << ", message:\n    " << r.message << "\n  "
                << absl::StrJoin(problems, "\n  ");
}

std::string FaultTest::Job(const std::string& suffix) const {
  std::string name = absl::StrCat(test_name_, "-", suffix);
  for (char& c : name) {
    if (c == '.') c = '-';
  }
  return name;
}

void FaultTest::Touch(const std::string& name) {
  std::ofstream(absl::StrCat(scratch_dir_, "/", name)) << "test";
}

int64_t FaultTest::ServerRssKib() {
  if (server_ == nullptr) {
    ADD_FAILURE() << "no reducerd";
    return 0;
  }
  absl::StatusOr<int64_t> rss = ReadVmRssKib(server_->pid());
  EXPECT_TRUE(rss.ok()) << rss.status();
  return rss.ok() ? *rss : 0;
}

}  // namespace testing
}  // namespace reducer

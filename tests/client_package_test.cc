// The installed client library, used from outside the workspace as a CMake
// or pkg-config project uses it. The test extracts the install tree
// (//packaging/client:install_tree) and the worker's sources
// (tests/client_package/) into a fresh directory under /tmp, so that nothing
// of the workspace is on any include or library path, then:
//   - compiles every installed header on its own (no gRPC or protobuf header
//     may be reached from them);
//   - builds the worker with Debian's cmake (find_package(Reducer) through
//     -DCMAKE_PREFIX_PATH) and with `pkg-config --cflags --libs reducer`;
//   - runs two ranks of each build against a real reducerd: all-reduces and a
//     metric sync, checked by the worker against their closed forms.
//
// Every test has a hard time limit of its own (a watchdog), and reducerd
// must exit 0 on SIGTERM afterwards.
#include <signal.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"

namespace reducer {
namespace testing {
namespace {

namespace fs = std::filesystem;

// A cmake configure and build of one source file take about 5 s each on an
// idle 2-core machine; the limits leave room for a loaded one and for ASan.
constexpr absl::Duration kToolLimit = absl::Seconds(120);
constexpr absl::Duration kWorkerLimit = absl::Seconds(60);
constexpr absl::Duration kTestLimit = absl::Seconds(240);

// Under --config=asan the library carries the sanitizers' runtime
// references, so the consumer is built with the same sanitizers (its code is
// checked too) and their runtime comes first, as they require.
std::vector<std::string> SanitizerFlags() {
#if defined(__SANITIZE_ADDRESS__)
  return {"-fsanitize=address,undefined", "-fno-sanitize=vptr"};
#else
  return {};
#endif
}

// The release under test ("0.1.0"), from packaging/version.bzl through the
// test's environment; its major number is the library's soversion.
struct Version {
  std::string full;
  std::string major;
  std::string major_minor;
};
Version ReleaseVersion() {
  const char* env = std::getenv("REDUCER_VERSION");
  Version v;
  v.full = env != nullptr ? env : "";
  std::vector<std::string> parts = absl::StrSplit(v.full, '.');
  if (parts.size() == 3) {
    v.major = parts[0];
    v.major_minor = absl::StrCat(parts[0], ".", parts[1]);
  }
  return v;
}

// Runs `argv` (argv[0] a path) to completion; the result says how it ended.
ProcessResult RunTool(std::vector<std::string> argv, const std::string& name,
                  absl::Duration limit = kToolLimit) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Start(std::move(argv), name);
  if (!child.ok()) {
    ProcessResult failed;
    failed.name = name;
    failed.stderr_text = child.status().ToString();
    return failed;
  }
  return (*child)->Wait(limit);
}

class ClientPackageTest : public ::testing::Test {
 protected:
  // One copy of the install tree and the sources for all tests.
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/reducer-client-package-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr) << "mkdtemp " << pattern;
    root_ = new std::string(pattern);
    prefix_ = new std::string(*root_ + "/prefix");
    source_ = new std::string(*root_ + "/src");
    fs::create_directories(*prefix_);
    fs::create_directories(*source_);

    absl::StatusOr<std::string> tree =
        RunfilePath("packaging/client/reducer-client.tar");
    ASSERT_TRUE(tree.ok()) << tree.status();
    ProcessResult extracted =
        RunTool({"/bin/tar", "-C", *prefix_, "-xf", *tree}, "tar");
    ASSERT_TRUE(extracted.Succeeded()) << extracted.Describe();
    for (const char* file : {"CMakeLists.txt", "package_worker.cc"}) {
      absl::StatusOr<std::string> path =
          RunfilePath(absl::StrCat("tests/client_package/", file));
      ASSERT_TRUE(path.ok()) << path.status();
      fs::copy_file(*path, *source_ + "/" + file);
    }
  }

  static void TearDownTestSuite() {
    if (root_ != nullptr) {
      std::error_code ignored;
      fs::remove_all(*root_, ignored);
    }
    delete root_;
    delete prefix_;
    delete source_;
    root_ = prefix_ = source_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(root_, nullptr) << "the suite's setup failed";
    ASSERT_TRUE(fs::exists(*prefix_ + "/lib")) << "the suite's setup failed";
    version_ = ReleaseVersion();
    ASSERT_FALSE(version_.major.empty())
        << "REDUCER_VERSION \"" << version_.full << "\" is not MAJOR.MINOR.PATCH";
  }

  // cmake configures the worker's project into `build`, asking
  // find_package for release `wanted`.
  ProcessResult ConfigureCMake(const std::string& build, const std::string& wanted,
                               const std::string& name) {
    std::string flags;
    for (const std::string& flag : SanitizerFlags()) absl::StrAppend(&flags, flag, " ");
    return RunTool({"/usr/bin/cmake", "-S", *source_, "-B", build,
                    "-DCMAKE_PREFIX_PATH=" + *prefix_, "-DCMAKE_BUILD_TYPE=Release",
                    "-DREDUCER_VERSION_WANTED=" + wanted,
                    "-DCMAKE_CXX_FLAGS=" + flags, "-DCMAKE_EXE_LINKER_FLAGS=" + flags},
                   name);
  }

  // Starts reducerd, runs ranks 0 and 1 of `worker` in one job, and checks
  // that both pass every check and that reducerd exits 0 on SIGTERM.
  void RunTwoRanks(const std::string& worker, const std::string& job) {
    absl::StatusOr<std::unique_ptr<ReducerdProcess>> server =
        ReducerdProcess::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(
          {worker, (*server)->address(), job, absl::StrCat(rank), "2"},
          absl::StrCat(job, "_rank", rank));
      ASSERT_TRUE(child.ok()) << child.status();
      ranks.push_back(*std::move(child));
    }
    std::vector<ProcessResult> done = WaitAll(ranks, kWorkerLimit);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(done[rank].Succeeded())
          << done[rank].Describe() << "\nreducerd:\n" << (*server)->Logs();
      EXPECT_THAT(done[rank].stdout_text,
                  ::testing::HasSubstr(absl::StrCat("rank ", rank, ": OK")));
    }
    EXPECT_EQ((*server)->StopDrained(), "");
  }

  Version version_;
  static std::string* root_;    // the temporary directory, removed at the end
  static std::string* prefix_;  // the extracted install tree
  static std::string* source_;  // the worker's CMake project
};

std::string* ClientPackageTest::root_ = nullptr;
std::string* ClientPackageTest::prefix_ = nullptr;
std::string* ClientPackageTest::source_ = nullptr;

TEST_F(ClientPackageTest, InstallTreeHoldsLibraryLinksAndMetadata) {
  const std::string lib = *prefix_ + "/lib/";
  const std::string real = "libreducer_client.so." + version_.full;
  const std::string soname = "libreducer_client.so." + version_.major;
  EXPECT_TRUE(fs::is_regular_file(lib + real));
  ASSERT_TRUE(fs::is_symlink(lib + "libreducer_client.so"));
  ASSERT_TRUE(fs::is_symlink(lib + soname));
  EXPECT_EQ(fs::read_symlink(lib + "libreducer_client.so"), soname);
  EXPECT_EQ(fs::read_symlink(lib + soname), real);
  EXPECT_TRUE(fs::is_regular_file(lib + "pkgconfig/reducer.pc"));
  EXPECT_TRUE(fs::is_regular_file(lib + "cmake/Reducer/ReducerConfig.cmake"));
  EXPECT_TRUE(fs::is_regular_file(lib + "cmake/Reducer/ReducerConfigVersion.cmake"));
  EXPECT_TRUE(fs::is_regular_file(*prefix_ + "/include/reducer/client/reducer_client.h"));

  ProcessResult modversion =
      RunTool({"/usr/bin/env", "PKG_CONFIG_PATH=" + lib + "pkgconfig",
           "/usr/bin/pkg-config", "--modversion", "reducer"},
          "pkg_config_modversion");
  ASSERT_TRUE(modversion.Succeeded()) << modversion.Describe();
  EXPECT_EQ(modversion.stdout_text, version_.full + "\n");
}

// Each installed header compiles alone, with only the prefix and the system's
// headers on the path, and no gRPC or protobuf header is included on the way
// (g++ -H lists every header a translation unit opens).
TEST_F(ClientPackageTest, EveryHeaderCompilesAloneWithoutGrpcOrProtobuf) {
  Watchdog watchdog("EveryHeaderCompilesAloneWithoutGrpcOrProtobuf", kTestLimit);
  const std::string include = *prefix_ + "/include/reducer";
  int headers = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(include)) {
    if (!entry.is_regular_file()) continue;
    const std::string header = fs::relative(entry.path(), include).string();
    ++headers;
    const std::string unit = absl::StrCat(*root_, "/header_", headers, ".cc");
    std::ofstream(unit) << "#include \"" << header << "\"\n";
    ProcessResult compiled =
        RunTool({"/usr/bin/g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Werror",
             "-H", "-I" + include, unit},
            absl::StrCat("compile_header_", headers));
    EXPECT_TRUE(compiled.Succeeded()) << header << ":\n" << compiled.Describe();
    for (absl::string_view line : absl::StrSplit(compiled.stderr_text, '\n')) {
      if (!absl::StartsWith(line, ".")) continue;  // -H lines: ". path"
      EXPECT_THAT(std::string(line), ::testing::Not(::testing::HasSubstr("grpc")))
          << header << " reaches a gRPC header";
      EXPECT_THAT(std::string(line),
                  ::testing::Not(::testing::HasSubstr("google/protobuf")))
          << header << " reaches a protobuf header";
    }
  }
  EXPECT_EQ(headers, 8) << "client/reducer_client.h, the three client/ "
                           "headers it includes (client_options.h, "
                           "collective_handle.h, metric_sync.h) and the four "
                           "core/ headers they include, nothing else";
}

TEST_F(ClientPackageTest, CMakeWorkerReducesAgainstReducerd) {
  Watchdog watchdog("CMakeWorkerReducesAgainstReducerd", kTestLimit);
  const std::string build = *root_ + "/build_cmake";
  ProcessResult configured =
      ConfigureCMake(build, version_.major_minor, "cmake_configure");
  ASSERT_TRUE(configured.Succeeded()) << configured.Describe();
  ProcessResult built = RunTool({"/usr/bin/cmake", "--build", build}, "cmake_build");
  ASSERT_TRUE(built.Succeeded()) << built.Describe();
  RunTwoRanks(build + "/package_worker", "cmake_job");
}

TEST_F(ClientPackageTest, PkgConfigWorkerReducesAgainstReducerd) {
  Watchdog watchdog("PkgConfigWorkerReducesAgainstReducerd", kTestLimit);
  ProcessResult flags =
      RunTool({"/usr/bin/env", "PKG_CONFIG_PATH=" + *prefix_ + "/lib/pkgconfig",
           "/usr/bin/pkg-config", "--cflags", "--libs", "reducer"},
          "pkg_config");
  ASSERT_TRUE(flags.Succeeded()) << flags.Describe();

  const std::string worker = *root_ + "/package_worker_pkg_config";
  std::vector<std::string> compile = {"/usr/bin/g++", "-std=c++17", "-O1",
                                      "-Wall", "-Werror"};
  for (const std::string& flag : SanitizerFlags()) compile.push_back(flag);
  compile.push_back(*source_ + "/package_worker.cc");
  compile.push_back("-o");
  compile.push_back(worker);
  for (absl::string_view flag :
       absl::StrSplit(flags.stdout_text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    compile.emplace_back(flag);
  }
  compile.push_back("-Wl,-rpath," + *prefix_ + "/lib");
  ProcessResult built = RunTool(compile, "pkg_config_build");
  ASSERT_TRUE(built.Succeeded()) << built.Describe();
  RunTwoRanks(worker, "pkg_config_job");
}

// ReducerConfigVersion.cmake refuses a release it is not compatible with.
TEST_F(ClientPackageTest, CMakeRefusesAnotherMajorVersion) {
  Watchdog watchdog("CMakeRefusesAnotherMajorVersion", kTestLimit);
  const std::string next_major = absl::StrCat(std::stoi(version_.major) + 1, ".0");
  ProcessResult configured =
      ConfigureCMake(*root_ + "/build_next_major", next_major, "cmake_configure_next");
  EXPECT_TRUE(configured.exited && configured.exit_code != 0)
      << configured.Describe();
  // CMake names the version it found and the one asked for.
  EXPECT_THAT(configured.stderr_text, ::testing::HasSubstr(version_.full));
  EXPECT_THAT(configured.stderr_text, ::testing::HasSubstr(next_major));
}

}  // namespace
}  // namespace testing
}  // namespace reducer

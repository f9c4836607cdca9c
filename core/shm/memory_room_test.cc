#include "core/shm/memory_room.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Fake files under a directory of the test's own: a cgroup mount at
// <dir>/cgroup where the process is in /job/rank (so its cgroup is
// <dir>/cgroup/job/rank), a cgroup file saying so, and a meminfo.
class MemoryRoomTest : public ::testing::Test {
 protected:
  MemoryRoomTest() {
    std::string test =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(::testing::TempDir(), "/", test);
    sources_.cgroup_root = absl::StrCat(dir_, "/cgroup");
    sources_.self_cgroup = absl::StrCat(dir_, "/self_cgroup");
    sources_.meminfo = absl::StrCat(dir_, "/meminfo");
    own_ = absl::StrCat(sources_.cgroup_root, "/job/rank");
    parent_ = absl::StrCat(sources_.cgroup_root, "/job");
    std::filesystem::create_directories(own_);
    Write(sources_.self_cgroup, "0::/job/rank\n");
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  static void WriteCgroup(const std::string& dir, const std::string& max,
                          const std::string& current) {
    Write(absl::StrCat(dir, "/memory.max"), max);
    Write(absl::StrCat(dir, "/memory.current"), current);
  }

  void WriteMeminfo(const std::string& available_kb) {
    Write(sources_.meminfo, absl::StrCat("MemTotal:       16000000 kB\n"
                                         "MemFree:         1000 kB\n"
                                         "MemAvailable:   ",
                                         available_kb,
                                         " kB\n"
                                         "Buffers:          2000 kB\n"));
  }

  std::string dir_, own_, parent_;
  MemorySources sources_;
};

TEST_F(MemoryRoomTest, FitsUnderTheCgroupLimitAndMemAvailable) {
  WriteCgroup(own_, "1000000\n", "400000\n");
  WriteMeminfo("2000");  // 2048000 bytes
  EXPECT_THAT(CheckMemoryRoom(600000, sources_), IsOk());
}

TEST_F(MemoryRoomTest, RefusesWhatExceedsTheCgroupLimitNamingFileAndNumbers) {
  WriteCgroup(own_, "1000000\n", "400000\n");
  WriteMeminfo("2000");
  EXPECT_THAT(
      CheckMemoryRoom(600001, sources_),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr(absl::StrCat(own_, "/memory.max is 1000000")),
                     HasSubstr(absl::StrCat(own_, "/memory.current is 400000")),
                     HasSubstr("leaving 600000 bytes"), HasSubstr("600001"))));
}

TEST_F(MemoryRoomTest, AnAncestorsTighterLimitBinds) {
  WriteCgroup(own_, "max\n", "400000\n");
  WriteCgroup(parent_, "1000000\n", "900000\n");
  WriteCgroup(sources_.cgroup_root, "50000000\n", "1000000\n");
  WriteMeminfo("2000");
  EXPECT_THAT(CheckMemoryRoom(100000, sources_), IsOk());
  EXPECT_THAT(CheckMemoryRoom(100001, sources_),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat(parent_,
                                              "/memory.max is 1000000"))));
}

TEST_F(MemoryRoomTest, InACgroupNamespaceTheRootIsTheOwnCgroup) {
  Write(sources_.self_cgroup, "0::/\n");
  WriteCgroup(own_, "10\n", "0\n");  // not this process's: ignored
  WriteCgroup(sources_.cgroup_root, "1000000\n", "400000\n");
  WriteMeminfo("2000");
  EXPECT_THAT(CheckMemoryRoom(600000, sources_), IsOk());
  absl::Status s = CheckMemoryRoom(600001, sources_);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr(absl::StrCat(sources_.cgroup_root, "/memory.max is 1000000")));
}

TEST_F(MemoryRoomTest, WithoutTheCgroupFileOnlyTheRootIsConsulted) {
  std::filesystem::remove(sources_.self_cgroup);
  WriteCgroup(own_, "10\n", "0\n");
  WriteMeminfo("2000");
  EXPECT_THAT(CheckMemoryRoom(600000, sources_), IsOk());
  WriteCgroup(sources_.cgroup_root, "1000\n", "0\n");
  EXPECT_THAT(CheckMemoryRoom(1001, sources_),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(MemoryRoomTest, CurrentAboveTheLimitLeavesNoRoom) {
  WriteCgroup(own_, "1000\n", "5000\n");
  WriteMeminfo("2000");
  EXPECT_THAT(CheckMemoryRoom(1, sources_),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(MemoryRoomTest, UnlimitedCgroupLeavesMemAvailableToDecide) {
  WriteCgroup(own_, "max\n", "400000\n");
  WriteMeminfo("100");  // 102400 bytes
  EXPECT_THAT(CheckMemoryRoom(102400, sources_), IsOk());
  EXPECT_THAT(CheckMemoryRoom(102401, sources_),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(sources_.meminfo), HasSubstr("100 kB"),
                             HasSubstr("102400"), HasSubstr("102401"))));
}

TEST_F(MemoryRoomTest, MissingCgroupFilesFallBackToMeminfo) {
  WriteMeminfo("100");
  EXPECT_THAT(CheckMemoryRoom(102400, sources_), IsOk());
  EXPECT_THAT(CheckMemoryRoom(102401, sources_),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(MemoryRoomTest, CgroupWithOnlyOneOfItsFilesIsSkipped) {
  Write(absl::StrCat(own_, "/memory.max"), "10\n");
  WriteMeminfo("100");
  EXPECT_THAT(CheckMemoryRoom(102400, sources_), IsOk());
}

TEST_F(MemoryRoomTest, WithNoFileAtAllEverythingFits) {
  std::filesystem::remove(sources_.self_cgroup);
  EXPECT_THAT(CheckMemoryRoom(size_t{1} << 60, sources_), IsOk());
}

TEST_F(MemoryRoomTest, MalformedFileIsAnErrorNamingIt) {
  WriteCgroup(own_, "lots\n", "400000\n");
  WriteMeminfo("2000");
  EXPECT_THAT(CheckMemoryRoom(1, sources_),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr(absl::StrCat(own_, "/memory.max")),
                             HasSubstr("lots"))));

  WriteCgroup(own_, "max\n", "400000\n");
  WriteMeminfo("many");
  EXPECT_THAT(CheckMemoryRoom(1, sources_),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr(sources_.meminfo)));
}

TEST(MemoryRoomDefaultsTest, ThisMachineHasRoomForOnePageButNotForAnExbibyte) {
  EXPECT_THAT(CheckMemoryRoom(4096), IsOk());
  EXPECT_THAT(CheckMemoryRoom(size_t{1} << 60),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace reducer

#include "core/memory_room.h"

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class MemoryRoomTest : public ::testing::Test {
 protected:
  MemoryRoomTest() {
    std::string dir = ::testing::TempDir();
    std::string test =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    sources_.cgroup_max = absl::StrCat(dir, "/", test, ".memory.max");
    sources_.cgroup_current = absl::StrCat(dir, "/", test, ".memory.current");
    sources_.meminfo = absl::StrCat(dir, "/", test, ".meminfo");
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  void WriteMeminfo(const std::string& available_kb) {
    Write(sources_.meminfo, absl::StrCat("MemTotal:       16000000 kB\n"
                                         "MemFree:         1000 kB\n"
                                         "MemAvailable:   ",
                                         available_kb,
                                         " kB\n"
                                         "Buffers:          2000 kB\n"));
  }

  MemorySources sources_;
};

TEST_F(MemoryRoomTest, FitsUnderTheCgroupLimitAndMemAvailable) {
  Write(sources_.cgroup_max, "1000000\n");
  Write(sources_.cgroup_current, "400000\n");
  WriteMeminfo("2000");  // 2048000 bytes
  EXPECT_TRUE(CheckMemoryRoom(600000, sources_).ok());
}

TEST_F(MemoryRoomTest, RefusesWhatExceedsTheCgroupLimitNamingFileAndNumbers) {
  Write(sources_.cgroup_max, "1000000\n");
  Write(sources_.cgroup_current, "400000\n");
  WriteMeminfo("2000");
  absl::Status s = CheckMemoryRoom(600001, sources_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(sources_.cgroup_max), HasSubstr("1000000"),
                    HasSubstr(sources_.cgroup_current), HasSubstr("400000"),
                    HasSubstr("600001")));
}

TEST_F(MemoryRoomTest, CurrentAboveTheLimitLeavesNoRoom) {
  Write(sources_.cgroup_max, "1000\n");
  Write(sources_.cgroup_current, "5000\n");
  WriteMeminfo("2000");
  EXPECT_EQ(CheckMemoryRoom(1, sources_).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(MemoryRoomTest, UnlimitedCgroupLeavesMemAvailableToDecide) {
  Write(sources_.cgroup_max, "max\n");
  Write(sources_.cgroup_current, "400000\n");
  WriteMeminfo("100");  // 102400 bytes
  EXPECT_TRUE(CheckMemoryRoom(102400, sources_).ok());
  absl::Status s = CheckMemoryRoom(102401, sources_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(sources_.meminfo), HasSubstr("100 kB"),
                    HasSubstr("102400"), HasSubstr("102401")));
}

TEST_F(MemoryRoomTest, MissingCgroupFilesFallBackToMeminfo) {
  WriteMeminfo("100");
  EXPECT_TRUE(CheckMemoryRoom(102400, sources_).ok());
  EXPECT_EQ(CheckMemoryRoom(102401, sources_).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(MemoryRoomTest, CgroupWithOnlyOneOfItsFilesIsSkipped) {
  Write(sources_.cgroup_max, "10\n");
  WriteMeminfo("100");
  EXPECT_TRUE(CheckMemoryRoom(102400, sources_).ok());
}

TEST_F(MemoryRoomTest, WithNoFileAtAllEverythingFits) {
  EXPECT_TRUE(CheckMemoryRoom(size_t{1} << 60, sources_).ok());
}

TEST_F(MemoryRoomTest, MalformedFileIsAnErrorNamingIt) {
  Write(sources_.cgroup_max, "lots\n");
  Write(sources_.cgroup_current, "400000\n");
  WriteMeminfo("2000");
  absl::Status s = CheckMemoryRoom(1, sources_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(sources_.cgroup_max), HasSubstr("lots")));

  Write(sources_.cgroup_max, "max\n");
  WriteMeminfo("many");
  s = CheckMemoryRoom(1, sources_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), HasSubstr(sources_.meminfo));
}

TEST(MemoryRoomDefaultsTest, ThisMachineHasRoomForOnePageButNotForAnExbibyte) {
  EXPECT_TRUE(CheckMemoryRoom(4096).ok());
  EXPECT_EQ(CheckMemoryRoom(size_t{1} << 60).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace reducer

#include "client/security/token_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::StatusIs;
using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ReadTokenFileTest, TrimsTheWhitespaceAroundTheToken) {
  const std::string path = WriteFile("token", "  s3cr3t token\n\n");
  const absl::StatusOr<std::string> token = ReadTokenFile("--token_file", path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cr3t token");
}

TEST(ReadTokenFileTest, AMissingFileNamesTheFlagAndThePath) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/absent";
  EXPECT_THAT(ReadTokenFile("--upstream_token_file", path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--upstream_token_file=" + path +
                                 ": cannot read the file")));
}

TEST(ReadTokenFileTest, AFileOfWhitespaceIsRefused) {
  const std::string path = WriteFile("blank", " \n\t\n");
  EXPECT_THAT(
      ReadTokenFile("--token_file", path),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("--token_file=" + path + ": the file is empty")));
}

}  // namespace
}  // namespace reducer

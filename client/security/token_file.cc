#include "client/security/token_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace reducer {

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path) {
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", path,
                                                   ": cannot read the file (",
                                                   std::strerror(errno), ")"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, ": the file is empty"));
  }
  return token;
}

}  // namespace reducer

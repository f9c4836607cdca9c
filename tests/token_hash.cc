#include "tests/token_hash.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace reducer::testing {

std::string Sha256Hex(const std::string& token) {
  std::string out;
  FILE* pipe =
      popen(absl::StrCat("printf %s '", token, "' | sha256sum").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[256];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out.append(buffer, n);
  }
  pclose(pipe);
  return out.size() < 64 ? std::string() : out.substr(0, 64);
}

}  // namespace reducer::testing

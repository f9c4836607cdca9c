#include "server/credential_path.h"

#include <string>

namespace reducer {

std::string CredentialPath(const std::string& value,
                           const char* credentials_directory) {
  if (value.empty() || value.find('/') != std::string::npos ||
      credentials_directory == nullptr || credentials_directory[0] == '\0') {
    return value;
  }
  return std::string(credentials_directory) + "/" + value;
}

}  // namespace reducer

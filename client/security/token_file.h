// A bearer token kept in a file, as the tools and a relay take it
// (--token_file, --upstream_token_file): the file's text with the
// whitespace around it trimmed.
#ifndef REDUCER_CLIENT_SECURITY_TOKEN_FILE_H_
#define REDUCER_CLIENT_SECURITY_TOKEN_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reducer {

// The token in the file at `path`. INVALID_ARGUMENT when the file cannot be
// read (with the system's reason) or holds only whitespace, naming it as
// `flag`=path (flag as the caller's users spell it: "--token_file").
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path);

}  // namespace reducer

#endif  // REDUCER_CLIENT_SECURITY_TOKEN_FILE_H_

// MakeClientOptions: reducer.Client's arguments (python/src/reducer/__init__.py)
// as the C++ client's ClientOptions, checked before anything connects.
//
//   ClientOptions options = MakeClientOptions(
//       "127.0.0.1:50051", "job-1", 0, 2, 300.0, /*token=*/std::nullopt,
//       std::nullopt, std::nullopt, std::nullopt, std::nullopt, "auto");
//
// Thread-compatible (a plain function; it raises Python exceptions, so it is
// called with the GIL held).
#ifndef REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_
#define REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_

#include <optional>
#include <string>

#include "client/client_options.h"

namespace reducer::python {

// `token` None sends none; TLS is on when any of the tls_* files or
// `server_name` is given, and then needs `tls_ca_file`; `shared_memory` is
// "auto", "off" or "required". Raises ValueError, naming the argument (and
// the path, never the token), for a non-positive timeout, an empty token or
// one holding whitespace or a control character, a certificate without its
// key (or the reverse), TLS without a CA, a given file that cannot be read
// now, or an unknown shared_memory value.
ClientOptions MakeClientOptions(const std::string& target,
                                const std::string& job, int rank,
                                int world_size, double timeout_s,
                                const std::optional<std::string>& token,
                                const std::optional<std::string>& tls_ca_file,
                                const std::optional<std::string>& tls_cert_file,
                                const std::optional<std::string>& tls_key_file,
                                const std::optional<std::string>& server_name,
                                const std::string& shared_memory);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_

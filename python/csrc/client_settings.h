// MakeClientOptions: reducer.Client's arguments (python/src/reducer/__init__.py)
// as the C++ client's ClientOptions, checked before anything connects.
//
//   ClientArguments args;
//   args.target = "127.0.0.1:50051";
//   args.job = "job-1";
//   args.world_size = 2;
//   ClientOptions options = MakeClientOptions(args);
//
// Thread-compatible (a plain function; it raises Python exceptions, so it is
// called with the GIL held).
#ifndef REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_
#define REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_

#include <optional>
#include <string>

#include "client/client_options.h"

namespace reducer::python {

// reducer.Client's arguments, as `_reducer.Client(...)` takes them.
struct ClientArguments {
  std::string target;
  std::string job;
  int rank = 0;
  int world_size = 0;
  double timeout_s = 300;
  std::optional<std::string> token;  // None sends none
  // TLS is on when any of the tls_* files or server_name is given, and then
  // needs tls_ca_file.
  std::optional<std::string> tls_ca_file;
  std::optional<std::string> tls_cert_file;
  std::optional<std::string> tls_key_file;
  std::optional<std::string> server_name;
  std::string shared_memory = "auto";  // "auto", "off" or "required"
  // This job's ranks on this host (ClientOptions::local_world_size); 0:
  // unknown.
  int local_world_size = 0;
};

// Raises ValueError, naming the argument (and the path, never the token),
// for a non-positive timeout, an empty token or one holding whitespace or a
// control character, a certificate without its key (or the reverse), TLS
// without a CA, a given file that cannot be read now, an unknown
// shared_memory value, or a negative local_world_size.
ClientOptions MakeClientOptions(const ClientArguments& args);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_CLIENT_SETTINGS_H_

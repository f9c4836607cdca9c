#include "python/csrc/client_settings.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "pybind11/pybind11.h"

namespace reducer::python {

namespace py = pybind11;

ClientOptions MakeClientOptions(const ClientArguments& args) {
  ClientOptions options;
  options.target = args.target;
  options.job = args.job;
  options.rank = args.rank;
  options.world_size = args.world_size;
  if (args.local_world_size < 0) {
    throw py::value_error(
        "reducer: local_world_size must not be negative; got " +
        std::to_string(args.local_world_size));
  }
  options.local_world_size = args.local_world_size;
  if (!(args.timeout_s > 0)) {
    throw py::value_error("reducer: timeout must be positive seconds");
  }
  options.timeout = absl::Seconds(args.timeout_s);
  if (args.token.has_value()) {
    // gRPC metadata and the Bearer scheme take printable ASCII, no
    // spaces; a token read from a file with its newline lands here.
    if (args.token->empty()) {
      throw py::value_error(
          "reducer: token is empty; pass the job's token, or None to send "
          "none");
    }
    for (size_t i = 0; i < args.token->size(); ++i) {
      const unsigned char c = (*args.token)[i];
      if (c <= ' ' || c >= 0x7f) {
        throw py::value_error(
            "reducer: token holds whitespace or a non-printable character "
            "at position " + std::to_string(i) +
            "; strip the token (one read from a file ends in a newline)");
      }
    }
    options.token = *args.token;
  }
  // A file given must be readable now; the client re-reads it later
  // (rotation), so only its presence is checked here.
  auto check_file = [](const char* name, const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "r");
    if (file == nullptr) {
      const int error = errno;
      throw py::value_error(std::string("reducer: ") + name + "='" + path +
                            "' cannot be read: " + std::strerror(error));
    }
    std::fclose(file);
  };
  if (args.tls_ca_file || args.tls_cert_file || args.tls_key_file ||
      args.server_name) {
    if (args.tls_cert_file.has_value() != args.tls_key_file.has_value()) {
      throw py::value_error(
          args.tls_cert_file
              ? "reducer: tls_cert_file is given without tls_key_file; "
                "mutual TLS needs both (or neither)"
              : "reducer: tls_key_file is given without tls_cert_file; "
                "mutual TLS needs both (or neither)");
    }
    if (!args.tls_ca_file.has_value()) {
      throw py::value_error(
          "reducer: TLS (a tls_* file or server_name was given) needs "
          "tls_ca_file, the PEM file of the CA that signed reducerd's "
          "certificate");
    }
    options.tls = TlsOptions{};
    check_file("tls_ca_file", *args.tls_ca_file);
    options.tls->ca_file = *args.tls_ca_file;
    if (args.tls_cert_file.has_value()) {
      check_file("tls_cert_file", *args.tls_cert_file);
      check_file("tls_key_file", *args.tls_key_file);
      options.tls->cert_file = *args.tls_cert_file;
      options.tls->key_file = *args.tls_key_file;
    }
    options.tls->server_name = args.server_name.value_or("");
  }
  if (args.shared_memory == "auto") {
    options.shared_memory = SharedMemory::kAuto;
  } else if (args.shared_memory == "off") {
    options.shared_memory = SharedMemory::kOff;
  } else if (args.shared_memory == "required") {
    options.shared_memory = SharedMemory::kRequired;
  } else {
    throw py::value_error("reducer: shared_memory='" + args.shared_memory +
                          "' is not one of 'auto', 'off', 'required'");
  }
  return options;
}

}  // namespace reducer::python

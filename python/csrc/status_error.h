// absl::Status to Python exceptions: the one place where the module turns a
// failed call into a `reducer.ReducerError` subclass named after its code.
//
//   absl::Status s = client->Barrier(options);
//   ThrowIfError(s);   // raises reducer.DeadlineExceeded(message) etc.
//
// Thread-safe: ThrowIfError may be called with or without the GIL; the
// exception is translated into a Python one once pybind11 holds the GIL again.
#ifndef REDUCER_PYTHON_CSRC_STATUS_ERROR_H_
#define REDUCER_PYTHON_CSRC_STATUS_ERROR_H_

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"

namespace reducer::python {

// A failed absl::Status on its way to Python.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())),
        code_(static_cast<int>(status.code())) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Throws StatusError when `status` is not OK.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The value, or throws StatusError.
template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

// Registers the translator that raises
// `reducer._errors.error_for_code(code)(message)` for a StatusError.
void RegisterStatusErrorTranslator();

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_STATUS_ERROR_H_

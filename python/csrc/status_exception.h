// StatusError: a failed call's status code and message on their way to
// Python, where the translator raises
// `reducer._errors.error_for_code(code)(message)` (reducer.DeadlineExceeded,
// reducer.Aborted, ...). Depends on nothing but pybind11, so that both
// extension modules use it: `_reducer` (through status_error.h, which adds
// the absl::Status helpers) and `_torch_c`, which is built without Abseil.
//
//   RegisterStatusErrorTranslator();   // once, in the module's init
//   throw StatusError(4, "all_reduce ...: timed out");
//
// Each module registers the translator for its own copy of the class (both
// are built with hidden visibility). Thread-safe: throw with or without the
// GIL; the exception is translated once pybind11 holds the GIL again.
#ifndef REDUCER_PYTHON_CSRC_STATUS_EXCEPTION_H_
#define REDUCER_PYTHON_CSRC_STATUS_EXCEPTION_H_

#include <stdexcept>
#include <string>

namespace reducer::python {

class StatusError : public std::runtime_error {
 public:
  // `code` is an absl::StatusCode's value (not 0).
  StatusError(int code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Registers the translator that raises
// `reducer._errors.error_for_code(code)(message)` for a StatusError.
void RegisterStatusErrorTranslator();

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_STATUS_EXCEPTION_H_

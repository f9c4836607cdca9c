// absl::Status to Python exceptions: the one place where `_reducer` turns a
// failed call into a `reducer.ReducerError` subclass named after its code
// (through StatusError, python/csrc/status_exception.h).
//
//   absl::Status s = client->Barrier(options);
//   ThrowIfError(s);   // raises reducer.DeadlineExceeded(message) etc.
//
// Thread-safe: ThrowIfError may be called with or without the GIL.
#ifndef REDUCER_PYTHON_CSRC_STATUS_ERROR_H_
#define REDUCER_PYTHON_CSRC_STATUS_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "python/csrc/status_exception.h"

namespace reducer::python {

// Throws StatusError when `status` is not OK.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) {
    throw StatusError(static_cast<int>(status.code()),
                      std::string(status.message()));
  }
}

// The value, or throws StatusError.
template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_STATUS_ERROR_H_

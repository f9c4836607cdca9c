// The native API: how another extension module (reducer._torch_c, the torch
// backend's all-reduce) starts collectives on a reducer.Client's connection
// without Python in between.
//
// `_reducer` exports one NativeApi as the capsule `_reducer._native_api`
// (named kNativeApiCapsule). A module built apart from `_reducer` (by pip,
// against torch) shares no C++ object file with it, so this header holds the
// whole contract and depends on nothing but the standard library: plain
// enums, and abstract classes whose code lives in `_reducer` (their virtual
// calls run `_reducer`'s copy of the client library, never a second one).
// Both sides must be built with the same C++ standard library (std::string
// and std::unique_ptr cross the boundary); kNativeApiVersion changes with any
// change here, and a user checks it before the first call.
//
//   auto* api = static_cast<const NativeApi*>(
//       PyCapsule_Import("reducer._reducer._native_api", 0));
//   if (api->version != kNativeApiVersion) ...  // built against another one
//   std::unique_ptr<NativeConnection> connection = api->connection_of(client);
//   std::unique_ptr<NativePending> pending = connection->AllReduceInPlace(
//       data, count, NativeDataType::kFloat32, NativeReduceOp::kSum, 0.0);
//   NativeOutcome outcome = pending->Wait();  // outcome.code 0: data holds it
#ifndef REDUCER_PYTHON_CSRC_NATIVE_API_H_
#define REDUCER_PYTHON_CSRC_NATIVE_API_H_

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>

namespace reducer::python {

inline constexpr int kNativeApiVersion = 1;
inline constexpr char kNativeApiCapsule[] = "reducer._reducer._native_api";

// Reducer's element types and ops, in the order of core/data_type.h's
// DataType and ReduceOp (native_api.cc checks that they agree).
enum class NativeDataType : int {
  kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool,
};
enum class NativeReduceOp : int {
  kSum, kProduct, kMin, kMax, kAvg, kBitAnd, kBitOr, kBitXor,
};

// How a collective ended: `code` is an absl::StatusCode's value (0: OK), and
// `message` the status's message (empty when OK).
struct NativeOutcome {
  int code = 0;
  std::string message;
};

// A collective in flight. Wait() once, from one thread at a time; Ready()
// from that thread too (the owner serialises them). Destroying one that was
// not waited for waits first (its buffer is in use until then). Never
// needs the GIL.
class NativePending {
 public:
  virtual ~NativePending() = default;
  // Blocks until the collective ends (bounded by its deadline); a second
  // call returns FAILED_PRECONDITION.
  virtual NativeOutcome Wait() = 0;
  // Never blocks: true once Wait() would return without waiting for peers.
  virtual bool Ready() = 0;
};

// A reducer.Client's connection, kept alive (even past the Python object's
// close()) while this or a collective it started exists. Thread-safe; never
// needs the GIL.
class NativeConnection {
 public:
  virtual ~NativeConnection() = default;
  // Starts an in-place all-reduce of the `count` elements of `dtype` at
  // `data` (host memory, C order), which must stay valid and untouched by
  // the caller until the pending call's Wait() returns; on success they hold
  // the result, otherwise they are unchanged. `timeout_s` > 0 bounds the
  // collective; otherwise the client's timeout applies. Errors (a shape or
  // dtype that the job's peers disagree on, a dead peer) come from Wait().
  virtual std::unique_ptr<NativePending> AllReduceInPlace(
      void* data, int64_t count, NativeDataType dtype, NativeReduceOp op,
      double timeout_s) = 0;
};

struct NativeApi {
  int version;  // kNativeApiVersion of the `_reducer` that exported it
  // The connection of `client`, a `_reducer.Client`; call with the GIL
  // held. Null, with a Python exception set, when `client` is not one or
  // was closed.
  std::unique_ptr<NativeConnection> (*connection_of)(PyObject* client);
};

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_NATIVE_API_H_

// The `_reducer` side of the native API (python/csrc/native_api.h): a
// NativeConnection over a connected client.
#ifndef REDUCER_PYTHON_CSRC_NATIVE_API_IMPL_H_
#define REDUCER_PYTHON_CSRC_NATIVE_API_IMPL_H_

#include <memory>

#include "client/reducer_client.h"
#include "python/csrc/native_api.h"

namespace reducer::python {

// A connection that keeps `client` alive and starts its collectives.
std::unique_ptr<NativeConnection> MakeNativeConnection(
    std::shared_ptr<Client> client);

}  // namespace reducer::python

#endif  // REDUCER_PYTHON_CSRC_NATIVE_API_IMPL_H_

#include "server/version.h"

// server/BUILD passes packaging/version.bzl's REDUCER_VERSION as
// REDUCER_VERSION_STRING, a string literal.
#ifndef REDUCER_VERSION_STRING
#error "server/BUILD sets REDUCER_VERSION_STRING from packaging/version.bzl"
#endif

namespace reducer {

const char kReducerVersion[] = REDUCER_VERSION_STRING;

}  // namespace reducer

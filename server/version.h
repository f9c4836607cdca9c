// The release this build is (packaging/version.bzl's REDUCER_VERSION, the
// one place it is set), reported by `reducerd --version`, `reducerctl
// --version`, the reducer_build_info metric and the Admin service.
//
//   std::printf("reducerd %s\n", reducer::kReducerVersion);  // reducerd 0.1.0
#ifndef REDUCER_SERVER_VERSION_H_
#define REDUCER_SERVER_VERSION_H_

namespace reducer {

// "MAJOR.MINOR.PATCH", NUL-terminated; set at build time from version.bzl.
extern const char kReducerVersion[];

}  // namespace reducer

#endif  // REDUCER_SERVER_VERSION_H_

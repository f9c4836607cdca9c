// The reducerd build's version, reported by reducer_build_info and the
// Admin service.
#ifndef REDUCER_SERVER_VERSION_H_
#define REDUCER_SERVER_VERSION_H_

namespace reducer {

inline constexpr char kReducerVersion[] = "0.1.0";

}  // namespace reducer

#endif  // REDUCER_SERVER_VERSION_H_

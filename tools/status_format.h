// FormatStatus: an Admin.Status answer as reducerctl prints it, one line
// per job and one per collective not yet done:
//
//   reducerd 0.1.0: serving; memory budget 2048 of 2147483648 bytes reserved
//   job train-42: epoch 1, running, 2 of 2 ranks joined (0,1)
//     allreduce "step7" (ranks 0,1): waiting 12.5s for rank 1; stalled
//
// Thread-compatible (a pure function).
#ifndef REDUCER_TOOLS_STATUS_FORMAT_H_
#define REDUCER_TOOLS_STATUS_FORMAT_H_

#include <string>

#include "proto/reducer/v1/admin.pb.h"

namespace reducer {

std::string FormatStatus(const v1::StatusResponse& status);

}  // namespace reducer

#endif  // REDUCER_TOOLS_STATUS_FORMAT_H_

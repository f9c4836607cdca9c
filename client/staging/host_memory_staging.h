// A DeviceStaging for sessions that only ever hold host memory: every CUDA
// device is refused with FAILED_PRECONDITION, naming `why_no_devices`. It is
// the staging of a client built without the CUDA Toolkit, and of a relay's
// upstream session, which forwards bytes its ranks already put in host
// memory.
#ifndef REDUCER_CLIENT_STAGING_HOST_MEMORY_STAGING_H_
#define REDUCER_CLIENT_STAGING_HOST_MEMORY_STAGING_H_

#include <memory>
#include <string>

#include "client/staging/device_staging.h"

namespace reducer {

// `why_no_devices` completes "X is on cuda:N, but ..." in the refusal.
std::unique_ptr<DeviceStaging> NewHostMemoryStaging(std::string why_no_devices);

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_HOST_MEMORY_STAGING_H_

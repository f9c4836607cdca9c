// DeviceStaging for a build without the CUDA Toolkit: host memory is all
// there is, and every CUDA device is refused with FAILED_PRECONDITION.
#include <memory>

#include "client/staging/device_staging.h"
#include "client/staging/host_memory_staging.h"

namespace reducer {

std::unique_ptr<DeviceStaging> NewDeviceStaging(size_t /*pinned_bytes*/) {
  return NewHostMemoryStaging(
      "this Reducer client library was built without CUDA (no CUDA Toolkit "
      "at $CUDA_PATH or /usr/local/cuda when it was built); rebuild it where "
      "the toolkit is installed, or pass host memory");
}

}  // namespace reducer

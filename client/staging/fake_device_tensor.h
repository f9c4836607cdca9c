// FakeDeviceTensor: for tests of device staging on machines without a GPU,
// a copy of a host tensor in memory that stands in for a GPU's: it says it
// lives on `device`, but its bytes are host memory (malloc'd, freed and
// cloned through the Tensor's ForeignMemory as device memory would be).
//
//   Tensor on_gpu = FakeDeviceTensor(host_result, Device::Cuda(0));
//   std::memcmp(on_gpu.data(), host_result.data(), host_result.num_bytes());
//
// Thread-safe (a pure function).
#ifndef REDUCER_CLIENT_STAGING_FAKE_DEVICE_TENSOR_H_
#define REDUCER_CLIENT_STAGING_FAKE_DEVICE_TENSOR_H_

#include "core/device.h"
#include "core/tensor.h"

namespace reducer {

Tensor FakeDeviceTensor(const Tensor& host, Device device);

}  // namespace reducer

#endif  // REDUCER_CLIENT_STAGING_FAKE_DEVICE_TENSOR_H_

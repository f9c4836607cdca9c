#include "client/staging/fake_device_tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/buffer_cache.h"

namespace reducer {
namespace {

void FreeFake(void* p) { std::free(p); }

void* CloneFake(const void* p, size_t bytes) {
  void* q = std::malloc(bytes == 0 ? 1 : bytes);
  if (bytes > 0) std::memcpy(q, p, bytes);
  return q;
}

constexpr ForeignMemory kFakeDeviceMemory = {&FreeFake, &CloneFake};

}  // namespace

Tensor FakeDeviceTensor(const Tensor& host, Device device) {
  const size_t bytes = host.num_bytes();
  return Tensor::OnDevice(
      device, host.dtype(), host.shape(),
      Buffer(CloneFake(host.data(), bytes),
             BufferDeleter{nullptr, bytes, &kFakeDeviceMemory}));
}

}  // namespace reducer

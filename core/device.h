// Device: where a tensor's bytes live, the host's memory or one CUDA GPU's.
//
//   reducer::Device gpu = reducer::Device::Cuda(0);
//   TensorView in = TensorView::OnDevice(gpu, d_grad, DataType::kFloat32, {n});
//   assert(in.device() == gpu && gpu.ToString() == "cuda:0");
//
// A value type (thread-compatible, trivially copyable). It names a device;
// whether that device exists is checked where memory on it is used.
#ifndef REDUCER_CORE_DEVICE_H_
#define REDUCER_CORE_DEVICE_H_

#include <ostream>
#include <string>

namespace reducer {

class Device {
 public:
  enum class Type { kCpu, kCuda };

  // The host's memory (also what a default-constructed Device is).
  constexpr Device() = default;
  static constexpr Device Cpu() { return Device(); }
  // CUDA device `index`, as cudaSetDevice numbers them (a negative index
  // is refused where the device is used).
  static constexpr Device Cuda(int index) { return Device(Type::kCuda, index); }

  constexpr Type type() const { return type_; }
  // 0 for the CPU.
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == Type::kCpu; }
  constexpr bool is_cuda() const { return type_ == Type::kCuda; }

  // "cpu", "cuda:1".
  std::string ToString() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  friend constexpr bool operator!=(Device a, Device b) { return !(a == b); }

 private:
  constexpr Device(Type type, int index) : type_(type), index_(index) {}

  Type type_ = Type::kCpu;
  int index_ = 0;
};

// Writes device.ToString().
std::ostream& operator<<(std::ostream& out, Device device);

}  // namespace reducer

#endif  // REDUCER_CORE_DEVICE_H_

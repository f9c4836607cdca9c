// Tensor types shared by the core, the server and the client's public API.
//
//   std::vector<float> grad = ...;
//   TensorView in = TensorView::Of<float>(grad);             // read-only, 1-D
//   MutableTensorView io = MutableTensorView::Of<float>(absl::MakeSpan(grad));
//   Tensor t(DataType::kFloat32, {4, 3});                     // owns 48 bytes
//   absl::Span<const float> v = t.values<float>();
//
// Each carries a Device (core/device.h): the constructors above mean the CPU;
// OnDevice names another one (memory of a CUDA GPU):
//
//   TensorView d = TensorView::OnDevice(Device::Cuda(0), d_ptr, DataType::kFloat32, {n});
//
// All three are contiguous, row-major, little-endian. TensorView and
// MutableTensorView never own memory: the caller keeps it alive while the view
// is used. Tensor owns its bytes. None of them is thread-safe for concurrent
// mutation; const access from several threads is safe.
#ifndef REDUCER_CORE_TENSOR_H_
#define REDUCER_CORE_TENSOR_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/buffer.h"
#include "core/data_type.h"
#include "core/device.h"

namespace reducer {

// Maps a C++ element type to its DataType (float16 and bfloat16 have no C++
// type: use the constructors that take a DataType for them).
template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct DataTypeOf<int8_t> { static constexpr DataType value = DataType::kInt8; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUInt8; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::kBool; };

// Product of `shape`, or INVALID_ARGUMENT for a negative dimension or when the
// product (or product x element size, if `dtype` is given) overflows int64.
absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape);
absl::StatusOr<int64_t> NumBytes(DataType dtype, absl::Span<const int64_t> shape);

// "[4,3]"; "[]" for a scalar.
std::string ShapeToString(absl::Span<const int64_t> shape);

// A read-only view. The default-constructed view is "no input": data() is
// null, shape() empty and is_empty_input() true.
class TensorView {
 public:
  TensorView() = default;
  // `shape` must have no negative dimension; data may be null when the
  // shape has zero elements. (For a shape that breaks this rule, or whose
  // size overflows, num_elements() and num_bytes() are 0.)
  TensorView(const void* data, DataType dtype, std::vector<int64_t> shape);

  template <typename T>
  static TensorView Of(absl::Span<const T> values) {
    return TensorView(values.data(), DataTypeOf<T>::value,
                      {static_cast<int64_t>(values.size())});
  }
  // A view of memory on `device` (the constructor's rules otherwise).
  static TensorView OnDevice(Device device, const void* data, DataType dtype,
                             std::vector<int64_t> shape);

  Device device() const { return device_; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t num_bytes() const;
  const void* data() const { return data_; }
  // True only for TensorView(): a rank that has no input (Broadcast).
  bool is_empty_input() const { return !has_value_; }

 private:
  const void* data_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  std::vector<int64_t> shape_;
  bool has_value_ = false;
  Device device_;
};

// A writable view of caller memory.
class MutableTensorView {
 public:
  MutableTensorView(void* data, DataType dtype, std::vector<int64_t> shape);

  template <typename T>
  static MutableTensorView Of(absl::Span<T> values) {
    return MutableTensorView(values.data(), DataTypeOf<T>::value,
                             {static_cast<int64_t>(values.size())});
  }
  // A view of memory on `device`.
  static MutableTensorView OnDevice(Device device, void* data, DataType dtype,
                                    std::vector<int64_t> shape);

  Device device() const { return device_; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t num_bytes() const;
  void* data() const { return data_; }
  TensorView view() const {
    return TensorView::OnDevice(device_, data_, dtype_, shape_);
  }

 private:
  void* data_;
  DataType dtype_;
  std::vector<int64_t> shape_;
  Device device_;
};

// An owning tensor. Copyable (deep copy, on the same device) and movable.
// The constructors make CPU tensors, whose buffer is aligned to 64 bytes and
// zero-initialised; OnDevice adopts memory of another device. values() and
// CopyOf read the bytes on the host, so they are for CPU tensors only.
class Tensor {
 public:
  Tensor();  // float32, shape [0]
  // `shape` must be valid (NumBytes succeeds); the process aborts otherwise.
  // data() is never null, even for zero bytes (unless moved from).
  Tensor(DataType dtype, std::vector<int64_t> shape);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  // A deep copy of `view` (which must not be the empty input).
  static Tensor CopyOf(const TensorView& view);

  // A tensor whose bytes are unspecified (the caller overwrites them all),
  // with its buffer from `pool` (see core/buffer.h), or from malloc when
  // `pool` is null. `shape` must be valid, as for the constructor.
  static Tensor Uninitialized(DataType dtype, std::vector<int64_t> shape,
                              const std::shared_ptr<BufferPool>& pool);

  // A CPU tensor over `data`, memory it does not own (a range of the
  // same-host path's result segment, mapped read-only): the bytes stay valid
  // while the tensor lives, which holds `lender` (non-null) until then; its
  // last reference hands the memory back. The bytes must not be written
  // (mutable_data() may point at read-only pages); a copy of the tensor
  // owns a copy of them. `shape` must be valid, as for the constructor.
  static Tensor Lent(DataType dtype, std::vector<int64_t> shape,
                     const void* data, std::shared_ptr<const void> lender);

  // A tensor on `device` (not the CPU) owning `buffer`, which holds at least
  // NumBytes(dtype, shape) bytes of that device's memory and whose deleter
  // has `foreign` set (it frees and copies the buffer). `shape` must be
  // valid, as for the constructor.
  static Tensor OnDevice(Device device, DataType dtype,
                         std::vector<int64_t> shape, Buffer buffer);

  Device device() const { return device_; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const { return num_elements_; }
  size_t num_bytes() const { return num_bytes_; }
  const void* data() const { return data_.get(); }
  void* mutable_data() { return data_.get(); }

  // The elements as T; T must match dtype() in size (checked in debug builds).
  template <typename T>
  absl::Span<const T> values() const {
    assert(sizeof(T) == DataTypeSize(dtype_));
    return absl::Span<const T>(static_cast<const T*>(data()),
                               static_cast<size_t>(num_elements_));
  }
  template <typename T>
  absl::Span<T> mutable_values() {
    assert(sizeof(T) == DataTypeSize(dtype_));
    return absl::Span<T>(static_cast<T*>(mutable_data()),
                         static_cast<size_t>(num_elements_));
  }
  TensorView view() const {
    return TensorView::OnDevice(device_, data(), dtype_, shape_);
  }
  MutableTensorView mutable_view() {
    return MutableTensorView::OnDevice(device_, mutable_data(), dtype_, shape_);
  }

 private:
  // A tensor without a buffer yet (Uninitialized sets it).
  struct NoBuffer {};
  Tensor(NoBuffer, DataType dtype, std::vector<int64_t> shape);

  // Checks `shape` (aborting if invalid) and sets the size fields.
  void SetShape(std::vector<int64_t> shape);

  DataType dtype_;
  std::vector<int64_t> shape_;
  int64_t num_elements_;
  size_t num_bytes_;
  Buffer data_;
  Device device_;
};

}  // namespace reducer

#endif  // REDUCER_CORE_TENSOR_H_

#include "core/tensor.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace reducer {
namespace {


// The element count of a shape already known to be valid, or 0 for an invalid
// one. The views document that their shape must be valid; 0 keeps a caller
// that breaks that rule from reading or writing out of bounds.
int64_t ElementsOrZero(absl::Span<const int64_t> shape) {
  absl::StatusOr<int64_t> n = NumElements(shape);
  return n.ok() ? *n : 0;
}

size_t BytesOrZero(DataType dtype, absl::Span<const int64_t> shape) {
  absl::StatusOr<int64_t> n = NumBytes(dtype, shape);
  return n.ok() ? static_cast<size_t>(*n) : 0;
}


}  // namespace

absl::StatusOr<int64_t> NumElements(absl::Span<const int64_t> shape) {
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative dimension ", d, " in shape ", ShapeToString(shape)));
    }
    if (d == 0) has_zero = true;
  }
  // A zero anywhere makes the product zero, however large the other
  // dimensions are.
  if (has_zero) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "element count of shape ", ShapeToString(shape), " overflows int64"));
    }
  }
  return n;
}

absl::StatusOr<int64_t> NumBytes(DataType dtype,
                                 absl::Span<const int64_t> shape) {
  REDUCER_ASSIGN_OR_RETURN(const int64_t n, NumElements(shape));
  int64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(DataTypeSize(dtype)),
                             &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size of shape ", ShapeToString(shape), " ",
                     DataTypeName(dtype), " overflows int64"));
  }
  return bytes;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// TensorView ----------------------------------------------------------------

TensorView::TensorView(const void* data, DataType dtype,
                       std::vector<int64_t> shape)
    : data_(data), dtype_(dtype), shape_(std::move(shape)), has_value_(true) {}

TensorView TensorView::OnDevice(Device device, const void* data, DataType dtype,
                                std::vector<int64_t> shape) {
  TensorView view(data, dtype, std::move(shape));
  view.device_ = device;
  return view;
}

int64_t TensorView::num_elements() const { return ElementsOrZero(shape_); }

size_t TensorView::num_bytes() const { return BytesOrZero(dtype_, shape_); }

// MutableTensorView ---------------------------------------------------------

MutableTensorView::MutableTensorView(void* data, DataType dtype,
                                     std::vector<int64_t> shape)
    : data_(data), dtype_(dtype), shape_(std::move(shape)) {}

MutableTensorView MutableTensorView::OnDevice(Device device, void* data,
                                              DataType dtype,
                                              std::vector<int64_t> shape) {
  MutableTensorView view(data, dtype, std::move(shape));
  view.device_ = device;
  return view;
}

int64_t MutableTensorView::num_elements() const {
  return ElementsOrZero(shape_);
}

size_t MutableTensorView::num_bytes() const {
  return BytesOrZero(dtype_, shape_);
}

// Tensor --------------------------------------------------------------------

void Tensor::SetShape(std::vector<int64_t> shape) {
  shape_ = std::move(shape);
  absl::StatusOr<int64_t> bytes = NumBytes(dtype_, shape_);
  if (!bytes.ok() || DataTypeSize(dtype_) == 0) {
    // An internal invariant: callers validate shapes (ValidateContribution,
    // NumBytes) before they allocate.
    std::fprintf(stderr, "reducer::Tensor: invalid dtype %d or shape %s\n",
                 static_cast<int>(dtype_), ShapeToString(shape_).c_str());
    std::abort();
  }
  num_elements_ = *NumElements(shape_);
  num_bytes_ = static_cast<size_t>(*bytes);
}

Tensor::Tensor() : Tensor(DataType::kFloat32, {0}) {}

Tensor::Tensor(DataType dtype, std::vector<int64_t> shape) : dtype_(dtype) {
  SetShape(std::move(shape));
  data_ = AllocateBuffer(num_bytes_);
  std::memset(data_.get(), 0, num_bytes_);
}

Tensor::Tensor(NoBuffer, DataType dtype, std::vector<int64_t> shape)
    : dtype_(dtype) {
  SetShape(std::move(shape));
}

Tensor Tensor::Uninitialized(DataType dtype, std::vector<int64_t> shape,
                             const std::shared_ptr<BufferPool>& pool) {
  Tensor t(NoBuffer{}, dtype, std::move(shape));
  t.data_ =
      pool != nullptr ? pool->Get(t.num_bytes_) : AllocateBuffer(t.num_bytes_);
  return t;
}

Tensor Tensor::Lent(DataType dtype, std::vector<int64_t> shape,
                    const void* data, std::shared_ptr<const void> lender) {
  Tensor t(NoBuffer{}, dtype, std::move(shape));
  BufferDeleter deleter;
  deleter.lender = std::move(lender);
  t.data_ = Buffer(const_cast<void*>(data), std::move(deleter));
  return t;
}

Tensor Tensor::OnDevice(Device device, DataType dtype,
                        std::vector<int64_t> shape, Buffer buffer) {
  Tensor t(NoBuffer{}, dtype, std::move(shape));
  t.device_ = device;
  t.data_ = std::move(buffer);
  return t;
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_),
      device_(other.device_) {
  const ForeignMemory* foreign = other.data_.get_deleter().foreign;
  if (foreign != nullptr && other.data_ != nullptr) {
    // Memory of a device: copied there, by whoever allocated it.
    data_ = Buffer(foreign->clone(other.data_.get(), num_bytes_),
                   BufferDeleter{nullptr, num_bytes_, foreign});
    return;
  }
  data_ = AllocateBuffer(num_bytes_);
  // A moved-from tensor has no buffer; its copy gets a zeroed one (on the
  // CPU: a moved-from device tensor's copy no longer knows its allocator).
  if (other.data_ == nullptr) device_ = Device::Cpu();
  if (other.data_ != nullptr) {
    std::memcpy(data_.get(), other.data_.get(), num_bytes_);
  } else {
    std::memset(data_.get(), 0, num_bytes_);
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Tensor Tensor::CopyOf(const TensorView& view) {
  if (view.is_empty_input()) return Tensor();
  Tensor t(view.dtype(), view.shape());
  if (t.num_bytes_ > 0) std::memcpy(t.mutable_data(), view.data(), t.num_bytes_);
  return t;
}

}  // namespace reducer

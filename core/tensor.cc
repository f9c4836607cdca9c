#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reducer {
namespace {

// Tensor buffers start on a cache line, and 64 bytes is also the widest
// vector register (AVX-512), so kernels never straddle lines at the start.
constexpr size_t kTensorAlignment = 64;

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

// Buffers at least this large are mapped from the kernel with
// MAP_POPULATE: the kernel hands them over zeroed and already faulted in, in
// one call. Touching fresh malloc'd pages instead costs one page fault each,
// which on virtual machines was most of a 64 MiB all-reduce's client CPU
// (malloc serves buffers this large with fresh mappings on every call).
constexpr size_t kMapThresholdBytes = size_t{1} << 20;

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
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  int64_t bytes;
  if (__builtin_mul_overflow(*n, static_cast<int64_t>(DataTypeSize(dtype)),
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

int64_t TensorView::num_elements() const { return ElementsOrZero(shape_); }

size_t TensorView::num_bytes() const { return BytesOrZero(dtype_, shape_); }

// MutableTensorView ---------------------------------------------------------

MutableTensorView::MutableTensorView(void* data, DataType dtype,
                                     std::vector<int64_t> shape)
    : data_(data), dtype_(dtype), shape_(std::move(shape)) {}

int64_t MutableTensorView::num_elements() const {
  return ElementsOrZero(shape_);
}

size_t MutableTensorView::num_bytes() const {
  return BytesOrZero(dtype_, shape_);
}

// Tensor --------------------------------------------------------------------

void Tensor::FreeDeleter::operator()(void* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

// Allocates a zeroed, kTensorAlignment-aligned buffer of at least one line,
// so that data() is never null, even for zero bytes. Aborts when memory is
// exhausted, as operator new would.
std::unique_ptr<void, Tensor::FreeDeleter> Tensor::AllocateZeroed(
    size_t num_bytes) {
  if (num_bytes >= kMapThresholdBytes) {
    void* p = mmap(nullptr, num_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p != MAP_FAILED) {  // page-aligned, so kTensorAlignment-aligned
      return std::unique_ptr<void, FreeDeleter>(p, FreeDeleter(num_bytes));
    }
  }
  void* p = nullptr;
  if (num_bytes <= SIZE_MAX - kTensorAlignment) {
    // aligned_alloc wants a multiple of the alignment.
    const size_t rounded =
        num_bytes == 0 ? kTensorAlignment
                       : (num_bytes + kTensorAlignment - 1) / kTensorAlignment *
                             kTensorAlignment;
    p = std::aligned_alloc(kTensorAlignment, rounded);
  }
  if (p == nullptr) {
    std::fprintf(stderr, "reducer::Tensor: cannot allocate %zu bytes\n",
                 num_bytes);
    std::abort();
  }
  std::memset(p, 0, num_bytes);
  return std::unique_ptr<void, FreeDeleter>(p, FreeDeleter());
}

Tensor::Tensor() : Tensor(DataType::kFloat32, {0}) {}

Tensor::Tensor(DataType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
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
  data_ = AllocateZeroed(num_bytes_);
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      num_elements_(other.num_elements_),
      num_bytes_(other.num_bytes_),
      data_(AllocateZeroed(other.num_bytes_)) {
  // A moved-from tensor has no buffer; its copy keeps the zeroed one.
  if (other.data_ != nullptr && num_bytes_ > 0) {
    std::memcpy(data_.get(), other.data_.get(), num_bytes_);
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

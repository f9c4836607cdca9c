// Reduction kernels.
//
// How a call runs:
//  1. Reduce() validates the op x dtype pair and the pointers, then picks one
//     instantiation of Kernel<Conv, Op> with a switch on dtype and op. That
//     switch runs once per call, never per element.
//  2. The elements are processed in tiles of kTileBytes of accumulator. For
//     each tile the inputs are folded into the accumulator in input order,
//     up to four inputs per pass (FoldFirst, then FoldMore), so W <= 4 is a
//     single streaming pass and larger W re-reads only a tile that is still
//     in L1.
//  3. Each pass is a plain indexed loop over __restrict pointers calling an
//     inlined element function, run on spans of the constant kStep elements
//     so that gcc -O2 vectorises it. ReduceTile, which holds all the passes
//     for one tile, is compiled for SSE2 and AVX2 and the CPU picks one at
//     load time (kernel_clones.h); both give the same bits.
//  4. Signed integer sum, product and bitwise ops run on the unsigned type of
//     the same width (same bits, no undefined overflow); only min and max need
//     the signed type.
//  5. float16 and bfloat16 accumulate in a float32 tile on the stack and are
//     rounded once, to nearest even, when the tile is stored. kAvg divides
//     the accumulated sum by the number of inputs before that store.
//  6. `out` may be inputs[0]. When the accumulator is `out` itself, the first
//     pass then folds into `out` in place instead of reading inputs[0] through
//     a second pointer, so no two __restrict pointers ever alias.
#include "core/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "core/kernel_clones.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

// Accumulator bytes per tile: 16 KiB stays in L1 (32 KiB or more on every
// x86-64 and Arm server core) next to the streaming inputs, and is large
// enough that the per-tile loop overhead is noise.
constexpr size_t kTileBytes = 16 * 1024;

// Input pointers kept on the stack; more inputs than this (ranks in one
// group) use the heap, one allocation per call.
constexpr size_t kInlineInputs = 64;

// Inputs folded per pass over a tile. Four streams plus the output keep
// every hardware prefetcher busy without thrashing L1.
constexpr size_t kMaxFanIn = 4;

// Bit casts -------------------------------------------------------------------

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Picks a or b without a branch. The conversions below compute every case
// and choose with Select, so a loop that calls them has no control flow and
// no conditionally executed float operation, which gcc -O2 can vectorise.
inline uint32_t Select(bool condition, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (a & mask) | (b & ~mask);
}

// The conversions rely on IEEE float arithmetic in round-to-nearest-even
// without flush-to-zero, the C++ default.

// After F. Giesen's half_to_float_fast4.
inline float HalfToFloatInline(uint16_t h) {
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;  // float16 exponent mask
  const uint32_t bits = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = kShiftedExp & bits;
  const uint32_t normal = bits + ((127u - 15u) << 23);  // rebias the exponent
  const uint32_t special = normal + ((128u - 16u) << 23);  // inf, NaN: all ones
  // Zero and subnormals: renormalise through a float subtraction.
  const uint32_t subnormal =
      FloatBits(BitsFloat(normal + (1u << 23)) - BitsFloat(113u << 23));
  const uint32_t o =
      Select(exp == kShiftedExp, special, Select(exp == 0, subnormal, normal));
  return BitsFloat(o | static_cast<uint32_t>(h & 0x8000u) << 16);
}

// After F. Giesen's float_to_half_fast3_rtne.
inline uint16_t FloatToHalfInline(float value) {
  constexpr uint32_t kF32Infinity = 255u << 23;
  constexpr uint32_t kF16Overflow = (127u + 16u) << 23;  // 65536.0f
  constexpr uint32_t kF16MinNormal = 113u << 23;         // 2^-14
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t f = FloatBits(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  // NaN stays NaN (quiet), everything else this large is infinity.
  const uint32_t special = Select(f > kF32Infinity, 0x7e00u, 0x7c00u);
  // Subnormal or zero result: adding 0.5f aligns the ten mantissa bits at the
  // bottom of the float and the FPU rounds to nearest even.
  const uint32_t subnormal =
      FloatBits(BitsFloat(f) + BitsFloat(kDenormMagic)) - kDenormMagic;
  // Normal result: rebias the exponent and round to nearest even; a carry out
  // of the mantissa bumps the exponent, up to infinity for [65520, 65536).
  const uint32_t normal =
      (f + ((15u - 127u) << 23) + 0xfffu + ((f >> 13) & 1u)) >> 13;
  const uint32_t o = Select(f >= kF16Overflow, special,
                            Select(f < kF16MinNormal, subnormal, normal));
  return static_cast<uint16_t>(o | sign >> 16);
}

inline float BFloat16ToFloatInline(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBFloat16Inline(float value) {
  const uint32_t u = FloatBits(value);
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  // Round to nearest even; a carry may reach the exponent and, from the
  // largest finite values, infinity.
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // NaN: keep sign and high payload, set the quiet bit so that a NaN whose
  // payload lives only in the low bits does not turn into infinity.
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(Select(is_nan, nan, rounded));
}

// Element conversions: storage type In <-> accumulation type Acc --------------

template <typename T>
struct Identity {
  using In = T;
  using Acc = T;
  static T Load(T x) { return x; }
  static T Store(T x) { return x; }
};

struct HalfConversion {
  using In = uint16_t;
  using Acc = float;
  static float Load(uint16_t x) { return HalfToFloatInline(x); }
  static uint16_t Store(float x) { return FloatToHalfInline(x); }
};

struct BFloat16Conversion {
  using In = uint16_t;
  using Acc = float;
  static float Load(uint16_t x) { return BFloat16ToFloatInline(x); }
  static uint16_t Store(float x) { return FloatToBFloat16Inline(x); }
};

// kBool: any nonzero byte is true; the accumulator holds 0 or 1.
struct BoolConversion {
  using In = uint8_t;
  using Acc = uint8_t;
  static uint8_t Load(uint8_t x) { return x != 0; }
  static uint8_t Store(uint8_t x) { return x; }
};

// Element operations on the accumulation type ---------------------------------

template <typename T>
struct SumOp {
  static T Apply(T a, T b) { return static_cast<T>(a + b); }
};

template <typename T>
struct ProductOp {
  static T Apply(T a, T b) { return static_cast<T>(a * b); }
};

// Floating min and max propagate NaN like torch.minimum/maximum: if `a` is
// NaN the result is `a`, otherwise a NaN `b` fails the comparison and is
// chosen.
template <typename T>
struct MinOp {
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

template <typename T>
struct MaxOp {
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

template <typename T>
struct AndOp {
  static T Apply(T a, T b) { return static_cast<T>(a & b); }
};

template <typename T>
struct OrOp {
  static T Apply(T a, T b) { return static_cast<T>(a | b); }
};

template <typename T>
struct XorOp {
  static T Apply(T a, T b) { return static_cast<T>(a ^ b); }
};

// The passes ------------------------------------------------------------------
//
// Each pass is a plain loop over __restrict pointers (the *Span functions),
// run on spans of the constant kStep elements and then on the shorter rest:
// gcc's -O2 cost model vectorises only loops that need no scalar remainder,
// and a span of kStep elements needs none. Everything below ReduceTile is
// forced inline into it, so its clones (kernel_clones.h) vectorise all of it
// for their instruction set.

// Elements per span: a multiple of the lane count of every vector width for
// every element size (64 one-byte lanes fill a 512-bit register).
constexpr size_t kStep = 64;

// acc[i] = op(...op(op(Load(a[i]), Load(b[i])), Load(c[i]))..., Load(d[i]))
// over the first N of a, b, c, d.
template <class Conv, class Op, int N>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FoldFirstSpan(
    typename Conv::Acc* __restrict acc, const typename Conv::In* __restrict a,
    const typename Conv::In* __restrict b,
    const typename Conv::In* __restrict c,
    const typename Conv::In* __restrict d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    typename Conv::Acc v = Conv::Load(a[i]);
    if constexpr (N >= 2) v = Op::Apply(v, Conv::Load(b[i]));
    if constexpr (N >= 3) v = Op::Apply(v, Conv::Load(c[i]));
    if constexpr (N >= 4) v = Op::Apply(v, Conv::Load(d[i]));
    acc[i] = v;
  }
}

// acc[i] = op(...op(acc[i], Load(b[i]))..., Load(d[i])) over the first N of
// b, c, d.
template <class Conv, class Op, int N>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FoldMoreSpan(
    typename Conv::Acc* __restrict acc, const typename Conv::In* __restrict b,
    const typename Conv::In* __restrict c,
    const typename Conv::In* __restrict d, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    typename Conv::Acc v = acc[i];
    v = Op::Apply(v, Conv::Load(b[i]));
    if constexpr (N >= 2) v = Op::Apply(v, Conv::Load(c[i]));
    if constexpr (N >= 3) v = Op::Apply(v, Conv::Load(d[i]));
    acc[i] = v;
  }
}

// acc[i] = Load(acc[i]): normalises an accumulator that already holds the raw
// inputs[0] (in-place call) when Load is not the identity (kBool).
template <class Conv>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void LoadInPlaceSpan(
    typename Conv::Acc* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Conv::Load(acc[i]);
}

// out[i] = Store(acc[i]), or Store(acc[i] / divisor) for kAvg. `out` may be
// `acc` itself when Acc is In, hence no __restrict.
template <class Conv, bool kDivide>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void StoreSpan(
    typename Conv::In* out, const typename Conv::Acc* acc,
    typename Conv::Acc divisor, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    typename Conv::Acc v = acc[i];
    if constexpr (kDivide) v = v / divisor;
    out[i] = Conv::Store(v);
  }
}

// In-place variant of StoreSpan for Acc == In: acc[i] = acc[i] / divisor.
template <typename Acc>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void DivideInPlaceSpan(Acc* __restrict acc,
                                                           Acc divisor,
                                                           size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / divisor;
}

// Folds the N inputs in[0..N) into acc[0, n). Unused pointer slots repeat
// in[0]; they are never read.
template <class Conv, class Op, int N>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FoldFirst(
    typename Conv::Acc* acc, const typename Conv::In* const* in, size_t n) {
  const typename Conv::In* a = in[0];
  const typename Conv::In* b = N >= 2 ? in[1] : a;
  const typename Conv::In* c = N >= 3 ? in[2] : a;
  const typename Conv::In* d = N >= 4 ? in[3] : a;
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    FoldFirstSpan<Conv, Op, N>(acc + i, a + i, b + i, c + i, d + i, kStep);
  }
  FoldFirstSpan<Conv, Op, N>(acc + i, a + i, b + i, c + i, d + i, n - i);
}

// Folds the N inputs in[0..N) into the accumulator acc[0, n).
template <class Conv, class Op, int N>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FoldMore(
    typename Conv::Acc* acc, const typename Conv::In* const* in, size_t n) {
  const typename Conv::In* b = in[0];
  const typename Conv::In* c = N >= 2 ? in[1] : b;
  const typename Conv::In* d = N >= 3 ? in[2] : b;
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    FoldMoreSpan<Conv, Op, N>(acc + i, b + i, c + i, d + i, kStep);
  }
  FoldMoreSpan<Conv, Op, N>(acc + i, b + i, c + i, d + i, n - i);
}

// Folds all inputs, already offset to the tile, into acc[0, n). When
// `acc_holds_input0` the accumulator already holds inputs[0] there.
template <class Conv, class Op>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void FoldTile(
    typename Conv::Acc* acc, const typename Conv::In* const* in,
    size_t num_inputs, bool acc_holds_input0, size_t n) {
  using In = typename Conv::In;
  size_t k = 0;  // inputs folded so far
  if constexpr (std::is_same_v<In, typename Conv::Acc>) {
    if (acc_holds_input0) {
      if constexpr (!std::is_same_v<Conv, Identity<In>>) {
        size_t i = 0;
        for (; i + kStep <= n; i += kStep)
          LoadInPlaceSpan<Conv>(acc + i, kStep);
        LoadInPlaceSpan<Conv>(acc + i, n - i);
      }
      k = 1;
    }
  }
  if (k == 0) {
    switch (num_inputs < kMaxFanIn ? num_inputs : kMaxFanIn) {
      case 1:
        FoldFirst<Conv, Op, 1>(acc, in, n);
        k = 1;
        break;
      case 2:
        FoldFirst<Conv, Op, 2>(acc, in, n);
        k = 2;
        break;
      case 3:
        FoldFirst<Conv, Op, 3>(acc, in, n);
        k = 3;
        break;
      default:
        FoldFirst<Conv, Op, 4>(acc, in, n);
        k = 4;
        break;
    }
  }
  while (k < num_inputs) {
    switch (num_inputs - k) {
      case 1:
        FoldMore<Conv, Op, 1>(acc, in + k, n);
        k += 1;
        break;
      case 2:
        FoldMore<Conv, Op, 2>(acc, in + k, n);
        k += 2;
        break;
      default:
        FoldMore<Conv, Op, 3>(acc, in + k, n);
        k += 3;
        break;
    }
  }
}

// Reduces one tile of at most kTileBytes of accumulator: elements [0, n) of
// the inputs `in` (already offset to the tile) into `out`. `in_place` when
// `out` is in[0].
template <class Conv, class Op, bool kDivide>
REDUCER_KERNEL_CLONES void ReduceTile(typename Conv::In* out,
                                      const typename Conv::In* const* in,
                                      size_t num_inputs, bool in_place,
                                      size_t n, size_t avg_divisor) {
  using In = typename Conv::In;
  using Acc = typename Conv::Acc;
  const Acc divisor = static_cast<Acc>(avg_divisor);
  if constexpr (std::is_same_v<In, Acc>) {
    // The output tile is the accumulator.
    FoldTile<Conv, Op>(out, in, num_inputs, in_place, n);
    if constexpr (kDivide) {
      size_t i = 0;
      for (; i + kStep <= n; i += kStep) {
        DivideInPlaceSpan(out + i, divisor, kStep);
      }
      DivideInPlaceSpan(out + i, divisor, n - i);
    }
  } else {
    alignas(64) Acc acc[kTileBytes / sizeof(Acc)];
    FoldTile<Conv, Op>(acc, in, num_inputs, false, n);
    size_t i = 0;
    for (; i + kStep <= n; i += kStep) {
      StoreSpan<Conv, kDivide>(out + i, acc + i, divisor, kStep);
    }
    StoreSpan<Conv, kDivide>(out + i, acc + i, divisor, n - i);
  }
}

// The whole kernel for one (conversion, op) pair. kDivide is kAvg.
template <class Conv, class Op, bool kDivide = false>
void Kernel(const void* const* inputs, size_t num_inputs, size_t num_elements,
            void* out_bytes, size_t avg_divisor) {
  using In = typename Conv::In;
  constexpr size_t kTile = kTileBytes / sizeof(typename Conv::Acc);
  static_assert(kTile % kStep == 0, "tiles must hold whole spans");
  In* out = static_cast<In*>(out_bytes);
  const bool in_place = out_bytes == inputs[0];
  // The inputs offset to the current tile; on the stack for any usual W.
  const In* inline_in[kInlineInputs];
  std::vector<const In*> heap_in;
  const In** in = inline_in;
  if (num_inputs > kInlineInputs) {
    heap_in.resize(num_inputs);
    in = heap_in.data();
  }
  for (size_t offset = 0; offset < num_elements; offset += kTile) {
    const size_t n =
        num_elements - offset < kTile ? num_elements - offset : kTile;
    for (size_t k = 0; k < num_inputs; ++k) {
      in[k] = static_cast<const In*>(inputs[k]) + offset;
    }
    ReduceTile<Conv, Op, kDivide>(out + offset, in, num_inputs, in_place, n,
                                  avg_divisor);
  }
}

using KernelFn = void (*)(const void* const*, size_t, size_t, void*, size_t);

// Kernels for a floating type through conversion Conv.
template <class Conv>
KernelFn FloatingKernel(ReduceOp op) {
  using Acc = typename Conv::Acc;
  switch (op) {
    case ReduceOp::kSum:
      return &Kernel<Conv, SumOp<Acc>>;
    case ReduceOp::kProduct:
      return &Kernel<Conv, ProductOp<Acc>>;
    case ReduceOp::kMin:
      return &Kernel<Conv, MinOp<Acc>>;
    case ReduceOp::kMax:
      return &Kernel<Conv, MaxOp<Acc>>;
    case ReduceOp::kAvg:
      return &Kernel<Conv, SumOp<Acc>, /*kDivide=*/true>;
    default:
      return nullptr;
  }
}

// Kernels for a signed or unsigned integer type S. Wrapping ops run on its
// unsigned counterpart U, which has the same size and bits.
template <typename S>
KernelFn IntegerKernel(ReduceOp op) {
  using U = std::make_unsigned_t<S>;
  switch (op) {
    case ReduceOp::kSum:
      return &Kernel<Identity<U>, SumOp<U>>;
    case ReduceOp::kProduct:
      return &Kernel<Identity<U>, ProductOp<U>>;
    case ReduceOp::kMin:
      return &Kernel<Identity<S>, MinOp<S>>;
    case ReduceOp::kMax:
      return &Kernel<Identity<S>, MaxOp<S>>;
    case ReduceOp::kBitAnd:
      return &Kernel<Identity<U>, AndOp<U>>;
    case ReduceOp::kBitOr:
      return &Kernel<Identity<U>, OrOp<U>>;
    case ReduceOp::kBitXor:
      return &Kernel<Identity<U>, XorOp<U>>;
    default:
      return nullptr;
  }
}

KernelFn BoolKernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBitOr:
      return &Kernel<BoolConversion, OrOp<uint8_t>>;
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBitAnd:
      return &Kernel<BoolConversion, AndOp<uint8_t>>;
    case ReduceOp::kBitXor:
      return &Kernel<BoolConversion, XorOp<uint8_t>>;
    default:
      return nullptr;
  }
}

KernelFn SelectKernel(ReduceOp op, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return FloatingKernel<Identity<float>>(op);
    case DataType::kFloat64:
      return FloatingKernel<Identity<double>>(op);
    case DataType::kFloat16:
      return FloatingKernel<HalfConversion>(op);
    case DataType::kBFloat16:
      return FloatingKernel<BFloat16Conversion>(op);
    case DataType::kInt8:
      return IntegerKernel<int8_t>(op);
    case DataType::kUInt8:
      return IntegerKernel<uint8_t>(op);
    case DataType::kInt32:
      return IntegerKernel<int32_t>(op);
    case DataType::kInt64:
      return IntegerKernel<int64_t>(op);
    case DataType::kBool:
      return BoolKernel(op);
  }
  return nullptr;
}

}  // namespace

absl::Status Reduce(ReduceOp op, DataType dtype,
                    absl::Span<const void* const> inputs, size_t num_elements,
                    void* out, size_t avg_divisor) {
  REDUCER_RETURN_IF_ERROR(CheckOpSupported(op, dtype));
  if (inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce ", ReduceOpName(op), " on ", DataTypeName(dtype),
                     " needs at least one input"));
  }
  if (num_elements == 0) return absl::OkStatus();
  if (out == nullptr) {
    return absl::InvalidArgumentError("reduce output is null");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce input ", i, " is null"));
    }
  }
  KernelFn kernel = SelectKernel(op, dtype);
  if (kernel == nullptr) {  // CheckOpSupported and SelectKernel disagree.
    return absl::InternalError(absl::StrCat("no kernel for ", ReduceOpName(op),
                                            " on ", DataTypeName(dtype)));
  }
  kernel(inputs.data(), inputs.size(), num_elements, out,
         avg_divisor > 0 ? avg_divisor : inputs.size());
  return absl::OkStatus();
}

float HalfToFloat(uint16_t bits) { return HalfToFloatInline(bits); }

uint16_t FloatToHalf(float value) { return FloatToHalfInline(value); }

float BFloat16ToFloat(uint16_t bits) { return BFloat16ToFloatInline(bits); }

uint16_t FloatToBFloat16(float value) { return FloatToBFloat16Inline(value); }

}  // namespace reducer

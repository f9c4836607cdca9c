#include "tests/closed_form.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace reducer {
namespace testing {
namespace {

// How many differing elements CompareElements lists before "...".
constexpr int kMaxListedMismatches = 5;

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// A hash of one element's coordinates.
uint64_t ElementHash(uint64_t seed, ReduceOp op, int rank, int64_t i) {
  uint64_t h = Mix64(seed ^ 0x5ca1ab1e0ddba11ULL);
  h = Mix64(h ^ static_cast<uint64_t>(op) * 0x100000001b3ULL);
  h = Mix64(h ^ static_cast<uint64_t>(rank));
  return Mix64(h ^ static_cast<uint64_t>(i));
}

// The floating-point closed form; see the header for why each is exact.
double FloatElement(ReduceOp op, int rank, int64_t i, uint64_t seed) {
  const int64_t s = static_cast<int64_t>(seed % 1024);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      // Multiples of 1/2 in [-2, 10.5] for ranks < 16: sums of up to 16 of
      // them are below 256 halves, exact even in bfloat16.
      return static_cast<double>((rank + 1) + (i * 7 + s) % 11 - 5) * 0.5;
    case ReduceOp::kProduct: {
      // +-1, +-2 or +-1/2: products are powers of two, at most 2^4 for 16
      // ranks (a 2 needs (i + rank + s) % 4 == 0).
      double v = 1.0;
      if ((i + rank + s) % 4 == 0) {
        v = 2.0;
      } else if ((i + 2 * rank) % 7 == 3) {
        v = 0.5;
      }
      if ((i * 3 + rank) % 5 == 0) v = -v;
      return v;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      // Multiples of 1/4 in [-5, 5].
      return static_cast<double>((i * 13 + rank * 29 + s * 3) % 41 - 20) * 0.25;
    default:
      return 0.0;  // not allowed on floating types
  }
}

// The integer closed form, as a 64-bit pattern to be truncated to the dtype.
uint64_t IntElement(ReduceOp op, int rank, int64_t i, uint64_t seed) {
  uint64_t h = ElementHash(seed, op, rank, i);
  // Odd factors keep products from collapsing to zero mod 2^bits.
  if (op == ReduceOp::kProduct) h |= 1;
  return h;
}

// The bool closed form: biased towards true for "and"-like ops and towards
// false for "or"-like ops, so that results are mixed for up to 8 ranks.
bool BoolElement(ReduceOp op, int rank, int64_t i, uint64_t seed) {
  const uint64_t h = ElementHash(seed, op, rank, i);
  switch (op) {
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBitAnd:
      return h % 8 != 0;
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBitOr:
      return h % 8 == 0;
    default:
      return (h & 1) != 0;
  }
}

// Sign- or zero-extends the low bits of `bits` per the integer dtype.
int64_t ExtendInt(DataType dtype, uint64_t bits) {
  switch (dtype) {
    case DataType::kInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(bits));
    case DataType::kUInt8:
      return static_cast<int64_t>(bits & 0xff);
    case DataType::kInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(bits));
    default:
      return static_cast<int64_t>(bits);
  }
}

void StoreInt(DataType dtype, uint8_t* out, int64_t i, uint64_t bits) {
  const size_t size = ElementSize(dtype);
  // Little-endian: the low `size` bytes of the pattern.
  for (size_t b = 0; b < size; ++b) {
    out[i * size + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
}

uint64_t LoadInt(DataType dtype, const uint8_t* data, int64_t i) {
  const size_t size = ElementSize(dtype);
  uint64_t bits = 0;
  for (size_t b = 0; b < size; ++b) {
    bits |= static_cast<uint64_t>(data[i * size + b]) << (8 * b);
  }
  return bits;
}

// Stores a value already rounded to float (or a double for float64).
void StoreFloat(DataType dtype, uint8_t* out, int64_t i, double value) {
  switch (dtype) {
    case DataType::kFloat32: {
      const float f = static_cast<float>(value);
      std::memcpy(out + i * 4, &f, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(out + i * 8, &value, 8);
      break;
    case DataType::kFloat16: {
      const uint16_t h = FloatToHalfBits(static_cast<float>(value));
      std::memcpy(out + i * 2, &h, 2);
      break;
    }
    case DataType::kBFloat16: {
      const uint16_t h = FloatToBFloat16Bits(static_cast<float>(value));
      std::memcpy(out + i * 2, &h, 2);
      break;
    }
    default:
      break;
  }
}

double LoadFloat(DataType dtype, const uint8_t* data, int64_t i) {
  switch (dtype) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, data + i * 4, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, data + i * 8, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return HalfBitsToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, data + i * 2, 2);
      return BFloat16BitsToFloat(h);
    }
    default:
      return 0.0;
  }
}

}  // namespace

bool IsFloatingType(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool OpAllowed(ReduceOp op, DataType dtype) {
  switch (op) {
    case ReduceOp::kAvg:
      return IsFloatingType(dtype);
    case ReduceOp::kBitAnd:
    case ReduceOp::kBitOr:
    case ReduceOp::kBitXor:
      return !IsFloatingType(dtype);
    default:
      return true;
  }
}

size_t ElementSize(DataType dtype) { return DataTypeSize(dtype); }

uint16_t FloatToHalfBits(float value) {
  const uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or NaN
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x0200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to inf
  if (abs < 0x38800000) {
    // Below 2^-14: a subnormal half (or zero) in units of 2^-24. Scaling by
    // 2^24 is exact; nearbyint rounds to nearest even in the default mode.
    const float scaled = BitsToFloat(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  const uint32_t exponent = (abs >> 23) - 127 + 15;
  const uint32_t mantissa = abs & 0x7fffff;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1) != 0)) ++h;
  return sign | static_cast<uint16_t>(h);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000 | (mantissa << 13));
  return BitsToFloat(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16Bits(float value) {
  uint32_t x = FloatBits(value);
  if ((x & 0x7fffffff) > 0x7f800000) {
    return static_cast<uint16_t>((x >> 16) | 0x0040);  // quiet NaN
  }
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float BFloat16BitsToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a64(const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::vector<uint8_t> ClosedFormInput(ReduceOp op, DataType dtype, int rank,
                                     int64_t n, uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * ElementSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DataType::kBool) {
      out[i] = BoolElement(op, rank, i, seed) ? 1 : 0;
    } else if (IsFloatingType(dtype)) {
      StoreFloat(dtype, out.data(), i, FloatElement(op, rank, i, seed));
    } else {
      StoreInt(dtype, out.data(), i, IntElement(op, rank, i, seed));
    }
  }
  return out;
}

uint64_t ReduceIntegers(ReduceOp op, absl::Span<const int64_t> values) {
  uint64_t acc = op == ReduceOp::kProduct  ? 1
                 : op == ReduceOp::kBitAnd ? ~uint64_t{0}
                                           : 0;
  int64_t extremum = 0;
  bool first = true;
  for (int64_t v : values) {
    const uint64_t bits = static_cast<uint64_t>(v);
    switch (op) {
      case ReduceOp::kSum:  // wraps: arithmetic mod 2^64
        acc += bits;
        break;
      case ReduceOp::kProduct:
        acc *= bits;
        break;
      case ReduceOp::kMin:
        extremum = first ? v : std::min(extremum, v);
        acc = static_cast<uint64_t>(extremum);
        break;
      case ReduceOp::kMax:
        extremum = first ? v : std::max(extremum, v);
        acc = static_cast<uint64_t>(extremum);
        break;
      case ReduceOp::kBitAnd:
        acc &= bits;
        break;
      case ReduceOp::kBitOr:
        acc |= bits;
        break;
      case ReduceOp::kBitXor:
        acc ^= bits;
        break;
      default:
        break;
    }
    first = false;
  }
  return acc;
}

std::vector<uint8_t> ClosedFormExpected(ReduceOp op, DataType dtype,
                                        absl::Span<const int> ranks, int64_t n,
                                        uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * ElementSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DataType::kBool) {
      bool acc = op == ReduceOp::kProduct || op == ReduceOp::kMin ||
                 op == ReduceOp::kBitAnd;
      for (int r : ranks) {
        const bool v = BoolElement(op, r, i, seed);
        switch (op) {
          case ReduceOp::kProduct:
          case ReduceOp::kMin:
          case ReduceOp::kBitAnd:
            acc = acc && v;
            break;
          case ReduceOp::kBitXor:
            acc = acc != v;
            break;
          default:
            acc = acc || v;
            break;
        }
      }
      out[i] = acc ? 1 : 0;
    } else if (IsFloatingType(dtype)) {
      // Exact in double (and in the dtype) by construction.
      double acc = op == ReduceOp::kProduct ? 1.0 : 0.0;
      bool first = true;
      for (int r : ranks) {
        const double v = FloatElement(op, r, i, seed);
        switch (op) {
          case ReduceOp::kProduct:
            acc *= v;
            break;
          case ReduceOp::kMin:
            acc = first ? v : std::min(acc, v);
            break;
          case ReduceOp::kMax:
            acc = first ? v : std::max(acc, v);
            break;
          default:
            acc += v;
            break;
        }
        first = false;
      }
      if (op == ReduceOp::kAvg) {
        // The one rounding the contract allows: divide in the accumulation
        // type, then round to the dtype.
        if (dtype == DataType::kFloat64) {
          acc = acc / static_cast<double>(ranks.size());
        } else {
          acc = static_cast<float>(acc) / static_cast<float>(ranks.size());
        }
      }
      StoreFloat(dtype, out.data(), i, acc);
    } else {
      std::vector<int64_t> values;
      values.reserve(ranks.size());
      for (int r : ranks) {
        values.push_back(ExtendInt(dtype, IntElement(op, r, i, seed)));
      }
      const uint64_t acc = ReduceIntegers(op, values);
      StoreInt(dtype, out.data(), i, acc);
    }
  }
  return out;
}

std::string ElementToString(DataType dtype, const void* data, int64_t i) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  if (dtype == DataType::kBool) {
    return absl::StrCat(bytes[i] == 0 ? "false" : "true", " (0x",
                        absl::Hex(bytes[i]), ")");
  }
  if (IsFloatingType(dtype)) {
    const double v = LoadFloat(dtype, bytes, i);
    std::string bits;
    for (size_t b = ElementSize(dtype); b-- > 0;) {
      absl::StrAppendFormat(&bits, "%02x", bytes[i * ElementSize(dtype) + b]);
    }
    return absl::StrFormat("%.17g (0x%s)", v, bits);
  }
  return absl::StrCat(ExtendInt(dtype, LoadInt(dtype, bytes, i)));
}

absl::Status CompareElements(DataType dtype, const void* got, const void* want,
                             int64_t n, absl::string_view context) {
  const size_t size = ElementSize(dtype);
  if (n == 0 || std::memcmp(got, want, static_cast<size_t>(n) * size) == 0) {
    return absl::OkStatus();
  }
  const uint8_t* g = static_cast<const uint8_t*>(got);
  const uint8_t* w = static_cast<const uint8_t*>(want);
  int64_t mismatches = 0;
  std::string listed;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * size, w + i * size, size) == 0) continue;
    if (mismatches < kMaxListedMismatches) {
      absl::StrAppend(&listed, "\n  element ", i, ": got ",
                      ElementToString(dtype, got, i), ", want ",
                      ElementToString(dtype, want, i));
    }
    ++mismatches;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(context, ": ", mismatches, " of ", n, " ",
                   DataTypeName(dtype), " elements differ", listed,
                   mismatches > kMaxListedMismatches ? "\n  ..." : ""));
}

}  // namespace testing
}  // namespace reducer

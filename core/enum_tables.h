// Helpers for the enums whose enumerators are numbered 0, 1, ..., count - 1
// (DataType, ReduceOp, CollectiveKind, the metrics' label enums): their
// range, their names from a table in enumerator order, and their wire values
// (reducer.v1 numbers them from 1 and reserves 0 for "unspecified").
//
//   static constexpr absl::string_view kNames[] = {"sum", "product", ...};
//   static_assert(std::size(kNames) == kNumReduceOps);
//   return EnumName(op, kNames, "unknown_op");
#ifndef REDUCER_CORE_ENUM_TABLES_H_
#define REDUCER_CORE_ENUM_TABLES_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace reducer {

// Whether `value` (which a cast from an int may have set to anything) is one
// of the `count` enumerators.
template <typename Enum>
constexpr bool IsEnumerator(Enum value, int count) {
  const int v = static_cast<int>(value);
  return v >= 0 && v < count;
}

// names[value], the table holding one name per enumerator in order; `unknown`
// for a value outside the table.
template <typename Enum, size_t N>
constexpr absl::string_view EnumName(Enum value,
                                     const absl::string_view (&names)[N],
                                     absl::string_view unknown) {
  return IsEnumerator(value, static_cast<int>(N))
             ? names[static_cast<int>(value)]
             : unknown;
}

// The enumerator of wire value `value` (enumerator + 1), for an enum of
// `count` enumerators; INVALID_ARGUMENT naming `what` ("dtype") for 0
// ("unspecified") and for a value past the last enumerator.
template <typename Enum>
absl::StatusOr<Enum> EnumFromWire(int value, int count,
                                  absl::string_view what) {
  if (value == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is unspecified (wire value 0)"));
  }
  if (value < 1 || value > count) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ", what, " wire value ", value));
  }
  return static_cast<Enum>(value - 1);
}

}  // namespace reducer

#endif  // REDUCER_CORE_ENUM_TABLES_H_

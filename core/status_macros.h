// Early-return helpers for absl::Status and absl::StatusOr<T>, in the style
// of Abseil's and tensorstore's internal macros.
//
//   absl::StatusOr<Segment> OpenSegment(const Options& options) {
//     REDUCER_RETURN_IF_ERROR(CheckOptions(options));  // an absl::Status
//     // OpenFd returns an absl::StatusOr<UniqueFd>, SizeOf one of size_t.
//     REDUCER_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(options));
//     REDUCER_ASSIGN_OR_RETURN(size_t bytes, SizeOf(fd));
//     return Segment(std::move(fd), bytes);
//   }
//
// REDUCER_RETURN_IF_ERROR(expr)
//   `expr` yields an absl::Status (or a reference to one); it is evaluated
//   exactly once. If that status is not OK, the enclosing function returns
//   it, unchanged (same code, message and payloads); the function's return
//   type must be constructible from an absl::Status (absl::Status or any
//   absl::StatusOr<T>). Otherwise execution continues. A single statement:
//   safe as the body of an unbraced if/else.
//
// REDUCER_ASSIGN_OR_RETURN(lhs, rexpr)
//   `rexpr` yields an absl::StatusOr<T>; it is evaluated exactly once. If it
//   is not OK, the enclosing function returns its status, unchanged, as
//   above. Otherwise its value is moved into `lhs`, which is either a
//   declaration (`T x`, `const T x`, `auto x`), whose variable lives on in
//   the enclosing scope, or an existing lvalue (`x`, `*ptr`, `s.field`),
//   which is assigned. Limits, as for every macro of its kind:
//   - it expands to several statements: never the body of an unbraced
//     if/else/for/while (use braces);
//   - at most one per source line (its hidden temporary is named after
//     __LINE__);
//   - a comma outside parentheses (a template's second argument, as in
//     `std::pair<int, int> p`) splits the macro's arguments: name the type
//     with an alias, or use `auto`.
#ifndef REDUCER_CORE_STATUS_MACROS_H_
#define REDUCER_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define REDUCER_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    if (::absl::Status reducer_status_macros_status = (expr);           \
        !reducer_status_macros_status.ok()) {                           \
      return reducer_status_macros_status;                              \
    }                                                                   \
  } while (false)

#define REDUCER_ASSIGN_OR_RETURN(lhs, rexpr)                        \
  REDUCER_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL(                      \
      REDUCER_STATUS_MACROS_CONCAT(reducer_status_macros_statusor_, \
                                   __LINE__),                       \
      lhs, rexpr)

// Implementation details of the macros above; not for use elsewhere.
#define REDUCER_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                                \
  if (!statusor.ok()) {                                                   \
    return std::move(statusor).status();                                  \
  }                                                                       \
  lhs = *std::move(statusor)

#define REDUCER_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define REDUCER_STATUS_MACROS_CONCAT(a, b) \
  REDUCER_STATUS_MACROS_CONCAT_INNER(a, b)

#endif  // REDUCER_CORE_STATUS_MACROS_H_

// Test helpers for core's tests: the tensor specs and fingerprints they
// check, built in one line, and the INVALID_ARGUMENT expectation they share.
#ifndef REDUCER_CORE_FINGERPRINT_TESTING_H_
#define REDUCER_CORE_FINGERPRINT_TESTING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/data_type.h"
#include "core/fingerprint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/matchers.h"

namespace reducer {

// A tensor of `dtype` and `shape`, reduced with `op`.
inline TensorSpec Spec(DataType dtype, std::vector<int64_t> shape,
                       ReduceOp op = ReduceOp::kSum) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.op = op;
  return t;
}

// A contribution of `kind` over `group` (sorted ranks), rooted at `root`
// (-1: the kind has no root).
inline Fingerprint MakeFingerprint(CollectiveKind kind,
                                   std::vector<TensorSpec> tensors,
                                   std::vector<int> group, int root = -1) {
  Fingerprint fp;
  fp.kind = kind;
  fp.tensors = std::move(tensors);
  fp.group = std::move(group);
  fp.root = root;
  return fp;
}

// Expects `s` to be INVALID_ARGUMENT with `message` in its text.
inline void ExpectInvalid(const absl::Status& s, const std::string& message) {
  EXPECT_THAT(s, testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::HasSubstr(message)));
}

}  // namespace reducer

#endif  // REDUCER_CORE_FINGERPRINT_TESTING_H_

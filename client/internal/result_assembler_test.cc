// ResultAssembler: into tensors of its own, and into memory given
// (ResultInto), from messages in any order. Expected bytes are written out
// here.
#include "client/internal/result_assembler.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/payload_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/wire_conversion.h"
#include "tests/status_matchers.h"

namespace reducer {
namespace {

using ::reducer::testing::IsOk;
using ::reducer::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// float32[3] and int64[2], packed as their payload layout places them.
const std::vector<TensorSpec> kSpecs = {{DataType::kFloat32, {3}},
                                        {DataType::kInt64, {2}}};

std::string Packed() {
  const PayloadLayout layout = *ComputePayloadLayout(kSpecs);
  std::string packed(layout.total_bytes, '\0');
  const float f[] = {1.5f, -2.0f, 8.0f};
  const int64_t n[] = {-7, int64_t{1} << 40};
  std::memcpy(&packed[layout.offsets[0]], f, sizeof(f));
  std::memcpy(&packed[layout.offsets[1]], n, sizeof(n));
  return packed;
}

// A response message of bytes [begin, end) of `packed`, with the specs.
v1::CollectiveResponse Message(size_t begin, bool with_specs) {
  v1::CollectiveResponse fields;
  fields.set_offset(begin);
  if (with_specs) {
    for (const TensorSpec& s : kSpecs)
      *fields.add_result() = TensorSpecToWire(s);
  }
  return fields;
}

absl::Status AddRange(ResultAssembler& a, const std::string& packed,
                      size_t begin, size_t end, bool with_specs) {
  const absl::string_view piece(packed.data() + begin, end - begin);
  return a.Add(Message(begin, with_specs), {&piece, 1});
}

TEST(ResultAssemblerTest, AssemblesTensorsOfItsOwn) {
  const std::string packed = Packed();
  ResultAssembler a;
  ASSERT_THAT(AddRange(a, packed, 0, 8, /*with_specs=*/true), IsOk());
  ASSERT_THAT(AddRange(a, packed, 8, packed.size(), false), IsOk());
  absl::StatusOr<std::vector<Tensor>> result = a.Finish();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->size(), 2u);
  EXPECT_THAT((*result)[0].values<float>(), ElementsAre(1.5f, -2.0f, 8.0f));
  EXPECT_THAT((*result)[1].values<int64_t>(),
              ElementsAre(-7, int64_t{1} << 40));
}

TEST(ResultAssemblerTest, WritesIntoMemoryGivenAndSaysWhatLanded) {
  const std::string packed = Packed();
  const PayloadLayout layout = *ComputePayloadLayout(kSpecs);
  // The caller's memory: the two tensors apart, counted from 1000 on.
  auto memory = std::make_shared<std::vector<char>>(64, '\x5a');
  auto into = std::make_shared<ResultInto>();
  into->specs = kSpecs;
  into->data = {memory->data(), memory->data() + 32};
  into->offsets = {1000, 1100};
  std::vector<std::pair<size_t, size_t>> landed;
  into->landed = [&](size_t begin, size_t end) {
    landed.emplace_back(begin, end);
  };
  into->owner = memory;
  ResultAssembler a(nullptr, into);
  // The first message carries the specs and float 0; then the int64s (one
  // message across both tensors would be cut at the padding), then the
  // rest of the floats.
  ASSERT_THAT(AddRange(a, packed, 0, 4, /*with_specs=*/true), IsOk());
  ASSERT_THAT(AddRange(a, packed, layout.offsets[1], packed.size(), false),
              IsOk());
  ASSERT_THAT(AddRange(a, packed, 4, layout.offsets[1], false), IsOk());
  EXPECT_THAT(landed, ElementsAre(Pair(1000, 1004), Pair(1100, 1116),
                                  Pair(1004, 1012)));
  absl::StatusOr<std::vector<Tensor>> result = a.Finish();
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->size(), 2u);
  // Lent over the memory given, not copied.
  EXPECT_EQ((*result)[0].data(), memory->data());
  EXPECT_EQ((*result)[1].data(), memory->data() + 32);
  EXPECT_THAT((*result)[0].values<float>(), ElementsAre(1.5f, -2.0f, 8.0f));
  EXPECT_THAT((*result)[1].values<int64_t>(),
              ElementsAre(-7, int64_t{1} << 40));
  // The bytes between the tensors were left alone.
  EXPECT_EQ((*memory)[12], '\x5a');
}

TEST(ResultAssemblerTest, AResultOfOtherTensorsThanTheMemoryGivenIsRefused) {
  auto memory = std::make_shared<std::vector<char>>(64);
  auto into = std::make_shared<ResultInto>();
  into->specs = {{DataType::kFloat32, {4}}};
  into->data = {memory->data()};
  into->offsets = {0};
  into->owner = memory;
  ResultAssembler a(nullptr, into);
  EXPECT_THAT(
      AddRange(a, Packed(), 0, 8, /*with_specs=*/true),
      StatusIs(
          absl::StatusCode::kInternal,
          HasSubstr("where 1 tensor, the first [4] float32 was expected")));
}

TEST(ResultAssemblerTest, MissingBytesAreDataLossWithMemoryGivenToo) {
  const std::string packed = Packed();
  auto memory = std::make_shared<std::vector<char>>(64);
  auto into = std::make_shared<ResultInto>();
  into->specs = kSpecs;
  into->data = {memory->data(), memory->data() + 32};
  into->offsets = {0, 16};
  into->owner = memory;
  ResultAssembler a(nullptr, into);
  ASSERT_THAT(AddRange(a, packed, 0, 8, /*with_specs=*/true), IsOk());
  EXPECT_THAT(a.Finish(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("after 8 of")));
}

}  // namespace
}  // namespace reducer

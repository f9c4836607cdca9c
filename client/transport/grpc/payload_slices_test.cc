#include "client/transport/grpc/payload_slices.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace reducer {
namespace {

std::string Bytes(const grpc::Slice& slice) {
  return std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
}

// Three tensors of 3, 0 and 5 bytes: with 8-byte alignment they sit at
// offsets 0, 8 and 8, and the payload ends at 13.
struct ThreeTensors {
  std::vector<uint8_t> a = {1, 2, 3};
  std::vector<uint8_t> b;
  std::vector<uint8_t> c = {4, 5, 6, 7, 8};
  PayloadLayout layout;
  std::vector<const void*> inputs;

  ThreeTensors() {
    std::vector<TensorSpec> specs(3);
    for (TensorSpec& s : specs) s.dtype = DataType::kUInt8;
    specs[0].shape = {3};
    specs[1].shape = {0};
    specs[2].shape = {5};
    layout = *ComputePayloadLayout(specs);
    inputs = {a.data(), b.data(), c.data()};
  }
};

TEST(PackPayloadTest, CopiesEachTensorToItsOffsetAndZeroesThePadding) {
  ThreeTensors t;
  ASSERT_EQ(t.layout.total_bytes, 13u);
  const std::string want("\x01\x02\x03\0\0\0\0\0\x04\x05\x06\x07\x08", 13);
  EXPECT_EQ(Bytes(PackPayload(t.layout, t.inputs)), want);
}

TEST(PackPayloadTest, MatchesTheSlicesSentWithoutACopy) {
  ThreeTensors t;
  std::string sliced;
  for (const grpc::Slice& s :
       PayloadSlices(t.layout, t.inputs, 0, t.layout.total_bytes)) {
    sliced += Bytes(s);
  }
  EXPECT_EQ(Bytes(PackPayload(t.layout, t.inputs)), sliced);
}

TEST(PackPayloadTest, LeavesNothingOfTheCallerAfterItReturns) {
  ThreeTensors t;
  grpc::Slice packed = PackPayload(t.layout, t.inputs);
  std::memset(t.a.data(), 0xff, t.a.size());
  std::memset(t.c.data(), 0xff, t.c.size());
  EXPECT_EQ(Bytes(packed).substr(0, 3), std::string("\x01\x02\x03"));
  EXPECT_EQ(Bytes(packed).substr(8), std::string("\x04\x05\x06\x07\x08"));
}

}  // namespace
}  // namespace reducer

// wire_bytes: received slices become a Payload without copying, SharedBytes
// go back out as slices (the original slice's memory when they came from
// one), and a ResultMessage parses with the generated protobuf classes as a
// CollectiveResponse carrying its offset, specs, data and extra fields.
#include "server/grpc/wire_bytes.h"

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/byte_buffer_testing.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "server/engine/chunk_pool.h"

namespace reducer {
namespace {

// Slices this long are reference counted (short ones are stored inline in
// the slice, and move with it), as received tensor bytes are.
const std::string kFirst(40, 'a');
const std::string kSecond = std::string(40, 'b') + "0123456789";

TEST(WireBytesTest, PayloadSharesTheReceivedSlices) {
  SliceRange range;
  range.Append(grpc::Slice(kFirst));
  range.Append(grpc::Slice(kSecond));
  const char* second = reinterpret_cast<const char*>(range.slices()[1].begin());
  Payload payload = ToPayload(range);
  ASSERT_EQ(payload.size(), kFirst.size() + kSecond.size());
  ASSERT_EQ(payload.pieces().size(), 2u);
  EXPECT_EQ(payload.pieces()[1].data(), second);  // no copy
  std::string out(4, '\0');
  payload.CopyTo(kFirst.size() - 2, 4, out.data());  // across the two pieces
  EXPECT_EQ(out, "aabb");
}

TEST(WireBytesTest, ForwardedBytesGoOutAsTheOriginalSliceMemory) {
  SliceRange range;
  range.Append(grpc::Slice(kSecond));
  const char* received = reinterpret_cast<const char*>(range.slices()[0].begin());
  Payload payload = ToPayload(range);
  // (gRPC copies a sub-slice short enough to store inline; this one is not.)
  grpc::Slice out = ToSlice(payload.pieces()[0].Sub(11, 32));
  EXPECT_EQ(reinterpret_cast<const char*>(out.begin()), received + 11);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.begin()), out.size()),
            kSecond.substr(11, 32));
}

TEST(WireBytesTest, PooledBytesStayAliveWhileTheSliceLives) {
  ChunkPool pool(16, 1);
  ChunkPool::Buffer buffer = pool.Get();
  std::string("reduced!").copy(buffer.get(), 8);
  grpc::Slice out;
  {
    SharedBytes shared = pool.Share(std::move(buffer), 8);
    out = ToSlice(shared);
  }  // only the slice refers to the chunk now
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.begin()), out.size()),
            "reduced!");
}

TEST(WireBytesTest, EncodedResultParsesWithTheGeneratedClasses) {
  ChunkPool pool(16, 1);
  ChunkPool::Buffer buffer = pool.Get();
  std::string("result bytes").copy(buffer.get(), 12);
  ResultMessage message;
  message.offset = 24;
  TensorSpec spec;
  spec.dtype = DataType::kInt64;
  spec.shape = {3, 2};
  message.result_specs = std::make_shared<const std::vector<TensorSpec>>(
      std::vector<TensorSpec>{spec});
  SharedBytes shared = pool.Share(std::move(buffer), 12);
  message.data = {shared.Sub(0, 7), shared.Sub(7, 5)};
  v1::CollectiveResponse extra;
  extra.set_call_id(77);
  extra.mutable_status()->set_code(0);

  v1::CollectiveResponse parsed;
  ASSERT_TRUE(
      parsed.ParseFromString(FlattenByteBuffer(EncodeResult(message, extra))));
  EXPECT_EQ(parsed.offset(), 24u);
  EXPECT_EQ(parsed.call_id(), 77u);
  EXPECT_TRUE(parsed.has_status());
  EXPECT_EQ(parsed.data(), "result bytes");
  ASSERT_EQ(parsed.result_size(), 1);
  EXPECT_EQ(parsed.result(0).dtype(), v1::DATA_TYPE_INT64);
  EXPECT_EQ(parsed.result(0).shape_size(), 2);
}

TEST(WireBytesTest, LaterMessagesCarryNoSpecs) {
  ResultMessage message;
  message.offset = 8;
  v1::CollectiveResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(FlattenByteBuffer(EncodeResult(message))));
  EXPECT_EQ(parsed.offset(), 8u);
  EXPECT_EQ(parsed.result_size(), 0);
  EXPECT_FALSE(parsed.has_status());
}

}  // namespace
}  // namespace reducer

#include "proto/reducer/v1/collective_codec.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/byte_buffer_testing.h"
#include "tests/matchers.h"

namespace reducer {
namespace {

// Splits `bytes` into slices at the given cut points.
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t begin = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + begin, cut - begin);
    begin = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

v1::CollectiveRequest SampleRequest() {
  v1::CollectiveRequest r;
  r.mutable_header()->set_job("j1");
  r.mutable_header()->set_rank(3);
  r.mutable_header()->add_group(1);
  r.mutable_header()->add_group(3);
  auto* t = r.mutable_header()->add_tensors();
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(4);
  r.set_offset(1 << 20);
  return r;
}

TEST(CollectiveCodecTest, EncodedBytesParseAsTheProtobufMessage) {
  std::string a = "hello ", b = "world";
  grpc::Slice slices[] = {
      grpc::Slice(a.data(), a.size(), grpc::Slice::STATIC_SLICE),
      grpc::Slice(b.data(), b.size(), grpc::Slice::STATIC_SLICE)};
  grpc::ByteBuffer buffer = EncodeMessage(SampleRequest(), slices);

  v1::CollectiveRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(FlattenByteBuffer(buffer)));
  EXPECT_EQ(parsed.data(), "hello world");
  EXPECT_EQ(parsed.header().job(), "j1");
  EXPECT_EQ(parsed.offset(), 1u << 20);
}

TEST(CollectiveCodecTest, DecodesGeneratedSerializationSplitAnywhere) {
  v1::CollectiveRequest original = SampleRequest();
  original.set_data(std::string(1000, 'x') + "tail");
  const std::string bytes = original.SerializeAsString();
  for (size_t cut = 1; cut < bytes.size(); cut += 7) {
    grpc::ByteBuffer buffer = Split(bytes, {cut});
    DecodedMessage<v1::CollectiveRequest> decoded;
    ASSERT_THAT(DecodeMessage(&buffer, &decoded), IsOk()) << "cut at " << cut;
    std::string data(decoded.data.size(), '\0');
    decoded.data.CopyTo(data.data());
    EXPECT_EQ(data, original.data()) << "cut at " << cut;
    EXPECT_TRUE(decoded.fields.data().empty());
    EXPECT_EQ(decoded.fields.header().rank(), 3);
    EXPECT_THAT(decoded.fields.header().group(), ::testing::ElementsAre(1, 3));
  }
}

TEST(CollectiveCodecTest, PartialCopyReadsAcrossSlices) {
  v1::CollectiveResponse original;
  original.set_data("0123456789abcdef");
  grpc::ByteBuffer buffer =
      Split(original.SerializeAsString(), {4, 5, 9, 12});
  DecodedMessage<v1::CollectiveResponse> decoded;
  ASSERT_THAT(DecodeMessage(&buffer, &decoded), IsOk());
  char out[6] = {};
  decoded.data.CopyTo(5, 5, out);
  EXPECT_EQ(std::string(out), "56789");
}

TEST(CollectiveCodecTest, EmptyDataIsOmitted) {
  grpc::ByteBuffer buffer = EncodeMessage(SampleRequest(), {});
  DecodedMessage<v1::CollectiveRequest> decoded;
  ASSERT_THAT(DecodeMessage(&buffer, &decoded), IsOk());
  EXPECT_EQ(decoded.data.size(), 0u);
  EXPECT_EQ(decoded.fields.header().job(), "j1");
}

TEST(CollectiveCodecTest, PreEncodedFieldsMatchTheGeneratedSerialization) {
  std::string payload = "0123456789abcdef";
  grpc::Slice data[] = {grpc::Slice(payload.data(), payload.size(),
                                    grpc::Slice::STATIC_SLICE)};
  // The reference: the whole message built and serialized by protobuf.
  v1::CollectiveRequest whole = SampleRequest();
  whole.set_call_id(9);
  whole.set_data(payload);

  // Ours: call_id and offset as fields, the header encoded apart.
  v1::CollectiveRequest rest;
  rest.set_call_id(9);
  rest.set_offset(whole.offset());
  grpc::ByteBuffer encoded = EncodeMessage(
      rest,
      EncodeField(v1::CollectiveRequest::kHeaderFieldNumber, whole.header()),
      data);
  v1::CollectiveRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(FlattenByteBuffer(encoded)));
  EXPECT_EQ(parsed.SerializeAsString(), whole.SerializeAsString());

  // Repeated fields encoded once and shared by several messages.
  v1::CollectiveResponse specs;
  for (int i = 0; i < 3; ++i) {
    v1::TensorSpec* t = specs.add_result();
    t->set_dtype(v1::DATA_TYPE_INT32);
    t->add_shape(i + 1);
  }
  const grpc::Slice shared(specs.SerializeAsString());
  for (uint64_t offset : {0u, 8u}) {
    v1::CollectiveResponse head;
    head.set_offset(offset);
    grpc::ByteBuffer message = EncodeMessage(head, shared, data);
    DecodedMessage<v1::CollectiveResponse> decoded;
    ASSERT_THAT(DecodeMessage(&message, &decoded), IsOk());
    EXPECT_EQ(decoded.fields.offset(), offset);
    ASSERT_EQ(decoded.fields.result_size(), 3);
    EXPECT_EQ(decoded.fields.result(2).shape(0), 3);
    EXPECT_EQ(decoded.data.size(), payload.size());
  }
}

TEST(CollectiveCodecTest, DecodingIntoAReusedMessageKeepsNothingOfTheLast) {
  v1::CollectiveResponse first;
  first.set_call_id(1);
  first.set_offset(64);
  for (int i = 0; i < 4; ++i) first.add_result()->add_shape(i + 2);
  v1::CollectiveResponse second;
  second.set_call_id(2);
  second.add_result()->add_shape(7);

  v1::CollectiveResponse reused;
  grpc::ByteBuffer one = EncodeMessage(first, {});
  SliceRange data;
  ASSERT_THAT(DecodeMessage(&one, &reused, &data), IsOk());
  EXPECT_EQ(reused.result_size(), 4);
  grpc::ByteBuffer two = EncodeMessage(second, {});
  SliceRange more;
  ASSERT_THAT(DecodeMessage(&two, &reused, &more), IsOk());
  EXPECT_EQ(reused.SerializeAsString(), second.SerializeAsString());
}

TEST(CollectiveCodecTest, TruncatedMessagesAreInvalidArgument) {
  v1::CollectiveRequest original = SampleRequest();
  original.set_data(std::string(300, 'y'));
  const std::string bytes = original.SerializeAsString();
  for (size_t len = 1; len < bytes.size(); ++len) {
    grpc::ByteBuffer buffer = Split(bytes.substr(0, len), {});
    DecodedMessage<v1::CollectiveRequest> decoded;
    absl::Status s = DecodeMessage(&buffer, &decoded);
    // A prefix may happen to be a complete, shorter message; if it decodes,
    // the data must be shorter than the original.
    if (s.ok()) {
      EXPECT_LT(decoded.data.size(), 300u) << "length " << len;
    } else {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("malformed Collective stream message")))
          << len;
    }
  }
}

TEST(CollectiveCodecTest, GarbageIsRejected) {
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  grpc::ByteBuffer buffer = Split(garbage, {});
  DecodedMessage<v1::CollectiveRequest> decoded;
  EXPECT_THAT(DecodeMessage(&buffer, &decoded),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string wrong_wire_type = "\x7d\x01\x02\x03\x04";  // field 15, fixed32
  grpc::ByteBuffer buffer2 = Split(wrong_wire_type, {});
  EXPECT_THAT(DecodeMessage(&buffer2, &decoded),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace reducer

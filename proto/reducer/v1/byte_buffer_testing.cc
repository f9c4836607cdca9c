#include "proto/reducer/v1/byte_buffer_testing.h"

#include <string>
#include <vector>

#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"

namespace reducer {

std::string FlattenByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

}  // namespace reducer

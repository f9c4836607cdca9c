// For tests of code that reads or writes gRPC messages as slices: the bytes
// of a grpc::ByteBuffer, all its slices in order, as one string.
//
//   grpc::ByteBuffer encoded = EncodeMessage(fields, data);
//   ASSERT_TRUE(parsed.ParseFromString(FlattenByteBuffer(encoded)));
//
// Records a test failure (and gives what it could read) when the buffer's
// slices cannot be read. Thread-safe.
#ifndef REDUCER_PROTO_REDUCER_V1_BYTE_BUFFER_TESTING_H_
#define REDUCER_PROTO_REDUCER_V1_BYTE_BUFFER_TESTING_H_

#include <string>

#include "grpcpp/support/byte_buffer.h"

namespace reducer {

std::string FlattenByteBuffer(const grpc::ByteBuffer& buffer);

}  // namespace reducer

#endif  // REDUCER_PROTO_REDUCER_V1_BYTE_BUFFER_TESTING_H_

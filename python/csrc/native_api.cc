#include "python/csrc/native_api_impl.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer::python {
namespace {

// Each Native* enum follows its core enum value for value, so that a cast
// converts one to the other.
#define REDUCER_SAME_ENUM(Native, Core, value)                          \
  static_assert(                                                        \
      static_cast<int>(Native::value) == static_cast<int>(Core::value), \
      #Native " must follow " #Core)
REDUCER_SAME_ENUM(NativeDataType, DataType, kFloat32);
REDUCER_SAME_ENUM(NativeDataType, DataType, kFloat64);
REDUCER_SAME_ENUM(NativeDataType, DataType, kFloat16);
REDUCER_SAME_ENUM(NativeDataType, DataType, kBFloat16);
REDUCER_SAME_ENUM(NativeDataType, DataType, kInt8);
REDUCER_SAME_ENUM(NativeDataType, DataType, kUInt8);
REDUCER_SAME_ENUM(NativeDataType, DataType, kInt32);
REDUCER_SAME_ENUM(NativeDataType, DataType, kInt64);
REDUCER_SAME_ENUM(NativeDataType, DataType, kBool);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kSum);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kProduct);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kMin);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kMax);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kAvg);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kBitAnd);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kBitOr);
REDUCER_SAME_ENUM(NativeReduceOp, ReduceOp, kBitXor);
#undef REDUCER_SAME_ENUM
static_assert(kNumDataTypes == 9, "NativeDataType must list every DataType");
static_assert(kNumReduceOps == 8, "NativeReduceOp must list every ReduceOp");

NativeOutcome OutcomeOf(const absl::Status& status) {
  return {static_cast<int>(status.code()), std::string(status.message())};
}

// An in-place all-reduce; holds the client until destroyed.
class PendingAllReduce final : public NativePending {
 public:
  PendingAllReduce(std::shared_ptr<Client> client,
                   std::unique_ptr<CollectiveHandle> handle)
      : client_(std::move(client)), handle_(std::move(handle)) {}

  NativeOutcome Wait() override {
    if (handle_ == nullptr) {
      return OutcomeOf(absl::FailedPreconditionError(
          "reducer: Wait() was already called"));
    }
    absl::Status status = handle_->Wait().status();
    handle_.reset();
    return OutcomeOf(status);
  }

  bool Ready() override { return handle_ == nullptr || handle_->Ready(); }

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<CollectiveHandle> handle_;  // null once waited for
};

class Connection final : public NativeConnection {
 public:
  explicit Connection(std::shared_ptr<Client> client)
      : client_(std::move(client)) {}

  std::unique_ptr<NativePending> AllReduceInPlace(void* data, int64_t count,
                                                  NativeDataType dtype,
                                                  NativeReduceOp op,
                                                  double timeout_s) override {
    MutableTensorView view(data, static_cast<DataType>(dtype), {count});
    CallOptions options;
    if (timeout_s > 0) options.timeout = absl::Seconds(timeout_s);
    return std::make_unique<PendingAllReduce>(
        client_, client_->AllReduceInPlaceAsync(
                     view, static_cast<ReduceOp>(op), options));
  }

 private:
  std::shared_ptr<Client> client_;
};

}  // namespace

std::unique_ptr<NativeConnection> MakeNativeConnection(
    std::shared_ptr<Client> client) {
  return std::make_unique<Connection>(std::move(client));
}

}  // namespace reducer::python

#include "python/csrc/native_api_impl.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace reducer::python {
namespace {

#define REDUCER_SAME_ENUM(native, core)                                  \
  static_assert(static_cast<int>(NativeDataType::native) ==              \
                    static_cast<int>(DataType::core),                    \
                "NativeDataType must follow DataType")
REDUCER_SAME_ENUM(kFloat32, kFloat32);
REDUCER_SAME_ENUM(kFloat64, kFloat64);
REDUCER_SAME_ENUM(kFloat16, kFloat16);
REDUCER_SAME_ENUM(kBFloat16, kBFloat16);
REDUCER_SAME_ENUM(kInt8, kInt8);
REDUCER_SAME_ENUM(kUInt8, kUInt8);
REDUCER_SAME_ENUM(kInt32, kInt32);
REDUCER_SAME_ENUM(kInt64, kInt64);
REDUCER_SAME_ENUM(kBool, kBool);
#undef REDUCER_SAME_ENUM
static_assert(kNumDataTypes == 9, "NativeDataType must list every DataType");
static_assert(static_cast<int>(NativeReduceOp::kSum) ==
                      static_cast<int>(ReduceOp::kSum) &&
                  static_cast<int>(NativeReduceOp::kProduct) ==
                      static_cast<int>(ReduceOp::kProduct) &&
                  static_cast<int>(NativeReduceOp::kMin) ==
                      static_cast<int>(ReduceOp::kMin) &&
                  static_cast<int>(NativeReduceOp::kMax) ==
                      static_cast<int>(ReduceOp::kMax) &&
                  static_cast<int>(NativeReduceOp::kAvg) ==
                      static_cast<int>(ReduceOp::kAvg) &&
                  static_cast<int>(NativeReduceOp::kBitAnd) ==
                      static_cast<int>(ReduceOp::kBitAnd) &&
                  static_cast<int>(NativeReduceOp::kBitOr) ==
                      static_cast<int>(ReduceOp::kBitOr) &&
                  static_cast<int>(NativeReduceOp::kBitXor) ==
                      static_cast<int>(ReduceOp::kBitXor) &&
                  kNumReduceOps == 8,
              "NativeReduceOp must follow ReduceOp");

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

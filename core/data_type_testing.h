// Every DataType and every ReduceOp, in enumerator order, for the tests that
// sweep them.
#ifndef REDUCER_CORE_DATA_TYPE_TESTING_H_
#define REDUCER_CORE_DATA_TYPE_TESTING_H_

#include "core/data_type.h"

namespace reducer {

inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
    DataType::kInt32,    DataType::kInt64,   DataType::kBool};
static_assert(sizeof(kAllDataTypes) / sizeof(kAllDataTypes[0]) ==
              kNumDataTypes);

inline constexpr ReduceOp kAllReduceOps[] = {
    ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,   ReduceOp::kMax,
    ReduceOp::kAvg, ReduceOp::kBitAnd,  ReduceOp::kBitOr, ReduceOp::kBitXor};
static_assert(sizeof(kAllReduceOps) / sizeof(kAllReduceOps[0]) ==
              kNumReduceOps);

}  // namespace reducer

#endif  // REDUCER_CORE_DATA_TYPE_TESTING_H_

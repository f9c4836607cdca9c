#include "core/result_into.h"

namespace reducer {

std::vector<Tensor> LentTensors(const ResultInto& into) {
  std::vector<Tensor> tensors;
  tensors.reserve(into.specs.size());
  for (size_t i = 0; i < into.specs.size(); ++i) {
    tensors.push_back(Tensor::Lent(into.specs[i].dtype, into.specs[i].shape,
                                   into.data[i], into.owner));
  }
  return tensors;
}

}  // namespace reducer

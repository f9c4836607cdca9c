#include "core/result_into.h"

#include "absl/strings/str_cat.h"

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

std::string WhyNotFor(const ResultInto& into,
                      const std::vector<TensorSpec>& tensors) {
  if (into.specs.size() != tensors.size() ||
      into.data.size() != tensors.size() ||
      into.offsets.size() != tensors.size()) {
    return absl::StrCat("it holds ", into.specs.size(), " tensor(s), ",
                        into.data.size(), " data pointer(s) and ",
                        into.offsets.size(), " offset(s) for ", tensors.size(),
                        " tensor(s)");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (into.specs[i].dtype != tensors[i].dtype ||
        into.specs[i].shape != tensors[i].shape) {
      return absl::StrCat("its tensor ", i, " is ",
                          DescribeTensors({into.specs[i]}), ", not ",
                          DescribeTensors({tensors[i]}));
    }
  }
  if (into.owner == nullptr) return "it has no owner to keep its memory";
  return "";
}

}  // namespace reducer

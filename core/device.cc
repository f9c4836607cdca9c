#include "core/device.h"

namespace reducer {

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& out, Device device) {
  return out << device.ToString();
}

}  // namespace reducer

#include "server/grpc/call_token.h"

#include <string>

namespace reducer {

PresentedToken TokenOf(const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return PresentToken(nullptr);
  const std::string value(it->second.data(), it->second.size());
  return PresentToken(&value);
}

}  // namespace reducer

// Test helper: SharedBytes over a copy of a string, for tests that feed a
// Collective or keep a result without a transport.
//
//   auto owner = std::make_shared<const StringOwner>(input);
//   SharedBytes whole(owner, owner->bytes().data(), input.size());
//   SharedBytes same = StringBytes(input);  // the two lines above in one
#ifndef REDUCER_SERVER_ENGINE_STRING_BYTES_H_
#define REDUCER_SERVER_ENGINE_STRING_BYTES_H_

#include <memory>
#include <string>
#include <utility>

#include "server/engine/shared_bytes.h"

namespace reducer {

// Owns a copy of a test's bytes for the SharedBytes made from it.
class StringOwner final : public ByteOwner {
 public:
  explicit StringOwner(std::string bytes) : bytes_(std::move(bytes)) {}
  const std::string& bytes() const { return bytes_; }

 private:
  const std::string bytes_;
};

// All of `bytes`, in storage of its own.
inline SharedBytes StringBytes(std::string bytes) {
  auto owner = std::make_shared<const StringOwner>(std::move(bytes));
  const std::string& held = owner->bytes();
  return SharedBytes(owner, held.data(), held.size());
}

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_STRING_BYTES_H_

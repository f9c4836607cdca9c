#include "server/engine/shared_bytes.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace reducer {
namespace {

// Storage of its own for a copy of lent bytes.
class CopiedBytes final : public ByteOwner {
 public:
  CopiedBytes(const char* data, size_t size) : bytes_(data, size) {}
  const char* data() const { return bytes_.data(); }

 private:
  const std::string bytes_;
};

}  // namespace

SharedBytes Keepable(const SharedBytes& bytes) {
  if (bytes.owner() == nullptr || !bytes.owner()->lent()) return bytes;
  auto copy = std::make_shared<const CopiedBytes>(bytes.data(), bytes.size());
  return SharedBytes(copy, copy->data(), bytes.size());
}

void Payload::Append(SharedBytes piece) {
  if (piece.empty()) return;
  size_ += piece.size();
  pieces_.push_back(std::move(piece));
}

void Payload::CopyTo(size_t begin, size_t n, void* dest) const {
  char* out = static_cast<char*>(dest);
  size_t skip = begin;
  for (const SharedBytes& piece : pieces_) {
    if (n == 0) return;
    if (skip >= piece.size()) {
      skip -= piece.size();
      continue;
    }
    const size_t here = std::min(piece.size() - skip, n);
    std::memcpy(out, piece.data() + skip, here);
    out += here;
    n -= here;
    skip = 0;
  }
}

SharedBytes Payload::Within(size_t begin, size_t n) const {
  size_t skip = begin;
  for (const SharedBytes& piece : pieces_) {
    if (skip >= piece.size()) {
      skip -= piece.size();
      continue;
    }
    if (n == 0 || piece.size() - skip < n) return SharedBytes();
    return piece.Sub(skip, n);
  }
  return SharedBytes();
}

void Payload::AppendPiecesWithin(size_t begin, size_t n,
                                 std::vector<SharedBytes>* out) const {
  size_t at = 0;  // where the current piece starts
  const size_t end = begin + n;
  for (const SharedBytes& piece : pieces_) {
    const size_t lo = std::max(begin, at);
    const size_t hi = std::min(end, at + piece.size());
    if (lo < hi) out->push_back(piece.Sub(lo - at, hi - lo));
    at += piece.size();
    if (at >= end) break;
  }
}

}  // namespace reducer

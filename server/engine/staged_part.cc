#include "server/engine/staged_part.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/packed_reduce.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

bool IsAligned(const char* p) {
  return reinterpret_cast<uintptr_t>(p) % kPayloadAlignment == 0;
}

// Where a part is read next: a piece, and a byte within it.
struct Cursor {
  size_t piece = 0;
  size_t offset = 0;
};

// The next n bytes of `part` from `at`, which moves past them: where they
// are when one piece holds them all from an aligned address, else copied
// into `scratch` (n bytes). The part must have n bytes left.
const char* NextTile(const StagedPart& part, Cursor& at, size_t n,
                     char* scratch) {
  const std::vector<SharedBytes>& pieces = part.pieces();
  if (at.offset == pieces[at.piece].size()) at = Cursor{at.piece + 1, 0};
  const SharedBytes& first = pieces[at.piece];
  const char* here = first.data() + at.offset;
  if (first.size() - at.offset >= n && IsAligned(here)) {
    at.offset += n;
    return here;
  }
  for (size_t copied = 0; copied < n;) {
    if (at.offset == pieces[at.piece].size()) at = Cursor{at.piece + 1, 0};
    const SharedBytes& piece = pieces[at.piece];
    const size_t len = std::min(n - copied, piece.size() - at.offset);
    std::memcpy(scratch + copied, piece.data() + at.offset, len);
    copied += len;
    at.offset += len;
  }
  return scratch;
}

}  // namespace

void StagedPart::Append(const Payload& data, size_t begin, size_t n) {
  const size_t first = pieces_.size();
  data.AppendPiecesWithin(begin, n, &pieces_);
  for (size_t i = first; i < pieces_.size(); ++i) size_ += pieces_[i].size();
}

const char* StagedPart::contiguous() const {
  if (pieces_.size() != 1 || !IsAligned(pieces_[0].data())) return nullptr;
  return pieces_[0].data();
}

absl::Status ReduceStagedParts(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const StagedPart* const> parts,
                               size_t begin, size_t end, char* out,
                               size_t avg_divisor) {
  const size_t num = parts.size();
  std::vector<const void*> inputs(num);
  bool all_contiguous = true;
  for (size_t i = 0; i < num; ++i) {
    if (parts[i]->size() != end - begin) {
      return absl::InternalError(
          absl::StrCat("staged part ", i, " holds ", parts[i]->size(),
                       " bytes of a ", end - begin, "-byte range"));
    }
    inputs[i] = parts[i]->contiguous();
    all_contiguous = all_contiguous && inputs[i] != nullptr;
  }
  if (all_contiguous) {
    return ReducePackedRange(layout, tensors, inputs, begin, end, out,
                             avg_divisor);
  }
  // Per reduction thread, grown to the largest group seen and kept: a tile
  // per part, aligned as the kernels need (uint64_t words).
  thread_local std::vector<uint64_t> scratch_words;
  constexpr size_t kTileWords = kStagedTileBytes / sizeof(uint64_t);
  if (scratch_words.size() < num * kTileWords) {
    scratch_words.resize(num * kTileWords);
  }
  char* scratch = reinterpret_cast<char*>(scratch_words.data());
  std::vector<Cursor> cursors(num);
  for (size_t tile = begin; tile < end; tile += kStagedTileBytes) {
    const size_t n = std::min(kStagedTileBytes, end - tile);
    for (size_t i = 0; i < num; ++i) {
      inputs[i] = NextTile(*parts[i], cursors[i], n,
                           scratch + i * kStagedTileBytes);
    }
    REDUCER_RETURN_IF_ERROR(ReducePackedRange(layout, tensors, inputs, tile,
                                              tile + n, out + (tile - begin),
                                              avg_divisor));
  }
  return absl::OkStatus();
}

}  // namespace reducer

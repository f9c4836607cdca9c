// StagedPart: one rank's part of a reduction chunk, held in the storage its
// bytes arrived in (received gRPC slices, a range of a shared segment)
// without a copy; and ReduceStagedParts, which reduces such parts.
//
// Received bytes come in pieces of the transport's choosing: gRPC hands a
// 1 MiB message over as HTTP/2 frames of up to 16 KiB, each starting at any
// address and any byte of an element. The parts therefore cannot go to the
// kernels (core/packed_reduce.h) as they are, which need each input whole
// and aligned. ReduceStagedParts hands them over tile by tile instead: a
// tile of a part that lies in one piece, aligned, is read where it is; any
// other is first gathered into a small per-thread scratch that stays in the
// CPU's cache, so the chunk's bytes are read from memory once.
//
//   StagedPart part;
//   part.Append(payload, 0, n);  // bytes [0, n) of a received Payload
//   ReduceStagedParts(layout, tensors, {&part, &other}, begin, end, out);
//
// Thread-compatible; the pieces are read-only, so parts may be reduced on
// another thread than the one that staged them once staging is over.
#ifndef REDUCER_SERVER_ENGINE_STAGED_PART_H_
#define REDUCER_SERVER_ENGINE_STAGED_PART_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/fingerprint.h"
#include "core/payload_layout.h"
#include "server/engine/shared_bytes.h"

namespace reducer {

// Tiles ReduceStagedParts gathers: a multiple of kPayloadAlignment, small
// enough that a tile of each of four ranks stays in L1 beside the kernel's
// output.
inline constexpr size_t kStagedTileBytes = 8 * 1024;

class StagedPart {
 public:
  // Adds bytes [begin, begin + n) of `data` at the end of the part, sharing
  // the storage of the pieces they lie in.
  void Append(const Payload& data, size_t begin, size_t n);

  size_t size() const { return size_; }
  // False until bytes were appended (a rank taking no part has none).
  explicit operator bool() const { return size_ > 0; }
  // The part's bytes when they lie in one piece that starts at a multiple of
  // kPayloadAlignment in memory (readable by the kernels where they are);
  // else null.
  const char* contiguous() const;
  const std::vector<SharedBytes>& pieces() const { return pieces_; }

 private:
  std::vector<SharedBytes> pieces_;
  size_t size_ = 0;
};

// ReducePackedRange (core/packed_reduce.h) over parts: parts[i] holds bytes
// [begin, end) of rank i's payload, in any pieces; `out` (aligned to
// kPayloadAlignment) gets bytes [begin, end) of the result. begin must be a
// multiple of kPayloadAlignment and every part end - begin bytes long.
// kAvg divides by `avg_divisor` (0: parts.size()), as ReducePackedRange.
// Errors are ReducePackedRange's; `out` may then be partly written.
absl::Status ReduceStagedParts(const PayloadLayout& layout,
                               absl::Span<const TensorSpec> tensors,
                               absl::Span<const StagedPart* const> parts,
                               size_t begin, size_t end, char* out,
                               size_t avg_divisor = 0);

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_STAGED_PART_H_

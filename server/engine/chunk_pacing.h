// Chunks that follow the link: how large a job's next reductions' chunks
// are, from the pace at which its earlier inputs arrived.
//
//   PaceEstimate pace;
//   pace.Note(50e6);                                // a collective's inputs came at 50 MB/s
//   size_t chunk = PacedChunkBytes(pace.bytes_per_second(), absl::Milliseconds(5),
//                                  1 << 20, /*current=*/1 << 20);  // 256 KiB
//
// A chunk is reducerd's unit of staging, reduction and answer, and the
// client's payload message (reducerd tells its clients the size). A shard
// answers chunk k once every rank's part of it is in, and reads each rank
// at most a window of chunks ahead, so over a slow link large chunks make
// the fast flows run ahead of the slow ones and the pipeline fill and drain
// slowly; the window's chunks queue in the link ahead of the last answers,
// so they trail the uploads by window x chunk at the pace. Over a fast link
// or on one host each chunk's fixed cost dominates and large chunks win. A
// chunk of about `chunk_time` (5 ms by default) at the measured pace serves
// both: 1 MiB (the default --chunk_bytes, the most) from about 150 MB/s up,
// 256 KiB at 50 MB/s, 64 KiB (the least) at 100 Mbit/s. The window (in
// chunks) stays as it is: 4 chunks of chunk_time at the pace cover a round
// trip of up to 4 x chunk_time, bytes in flight above the path's
// bandwidth-delay product.
//
// Pure functions and a value type; not synchronized.
#ifndef REDUCER_SERVER_ENGINE_CHUNK_PACING_H_
#define REDUCER_SERVER_ENGINE_CHUNK_PACING_H_

#include <cstddef>

#include "absl/time/time.h"

namespace reducer {

// The smallest paced chunk.
inline constexpr size_t kMinPacedChunkBytes = size_t{64} << 10;
// reducerd's --chunk_time unless given (EngineOptions, ServerOptions).
inline constexpr absl::Duration kDefaultChunkTime = absl::Milliseconds(5);
// A rank's input below this is not timed: too few messages to tell a pace.
inline constexpr size_t kMinPacedInputBytes = size_t{256} << 10;
// A job's chunk before any pace is measured: an input that arrives in one
// message cannot be timed, and at 1 MiB a 4 MiB collective cut over four
// shards is one message per shard.
inline constexpr size_t kUnpacedChunkBytes = size_t{256} << 10;

// The chunk a job starts with: min(kUnpacedChunkBytes, max_chunk_bytes),
// or max_chunk_bytes when pacing is off (chunk_time not positive). A fast
// job moves to max_chunk_bytes after its first timed collective.
size_t InitialChunkBytes(absl::Duration chunk_time, size_t max_chunk_bytes);

// The power of two nearest to `chunk_time` of payload at `bytes_per_second`,
// within [kMinPacedChunkBytes, max_chunk_bytes]; `max_chunk_bytes` when no
// pace is known (<= 0) or chunk_time is not positive. `max_chunk_bytes`
// itself need not be a power of two. `current_chunk_bytes` (the size in use)
// stays while that payload is within a factor of two of it, so that a pace
// near the midpoint of two sizes does not switch between them every call.
size_t PacedChunkBytes(double bytes_per_second, absl::Duration chunk_time,
                       size_t max_chunk_bytes, size_t current_chunk_bytes);

// A job's pace: the moving average (half old, half new) of the paces of
// its collectives' inputs, as they finish.
class PaceEstimate {
 public:
  void Note(double bytes_per_second);
  // 0 until a pace was noted.
  double bytes_per_second() const { return bytes_per_second_; }

 private:
  double bytes_per_second_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_CHUNK_PACING_H_

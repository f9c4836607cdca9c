// LandedRanges: which bytes of a result have arrived, as a set of
// half-open ranges that come in any order (the partitions of a sharded
// call land side by side) and may come twice (a replay).
//
//   LandedRanges landed;
//   landed.Add(4096, 8192);
//   landed.Add(0, 4096);
//   landed.Covers(0, 8192);  // true
//
// Thread-compatible.
#ifndef REDUCER_SERVER_RELAY_LANDED_RANGES_H_
#define REDUCER_SERVER_RELAY_LANDED_RANGES_H_

#include <cstddef>
#include <map>

namespace reducer {

class LandedRanges {
 public:
  // Bytes [begin, end) arrived (nothing when end <= begin).
  void Add(size_t begin, size_t end);
  // True when every byte of [begin, end) arrived (true when end <= begin).
  bool Covers(size_t begin, size_t end) const;
  // The disjoint ranges held, none touching another.
  size_t pieces() const { return ranges_.size(); }

 private:
  std::map<size_t, size_t> ranges_;  // begin -> end, disjoint, not touching
};

}  // namespace reducer

#endif  // REDUCER_SERVER_RELAY_LANDED_RANGES_H_

// SharedBytes and Payload: how the collective engine holds tensor bytes
// without knowing where they came from (a received gRPC message, a pooled
// chunk holding a reduced result, or any later transport).
//
//   Payload in = ...;                       // a rank's bytes, maybe in pieces
//   in.CopyTo(0, in.size(), staging);       // the one copy into a chunk
//   SharedBytes whole = in.Within(0, n);    // or none, if one piece has it
//   SharedBytes result = pool.Share(std::move(chunk), len);
//   SharedBytes part = result.Sub(64, 128); // no copy; shares the storage
//
// The storage stays alive while any SharedBytes refers to it; its owner
// (a ByteOwner subclass) frees it when the last one goes. Transports convert
// at their edge: server/grpc/wire_bytes.h turns gRPC slices into a Payload and
// SharedBytes back into slices, recovering the original slice when the
// bytes came from one.
//
// Thread-compatible values; the shared storage is read-only, so copies may
// be read from several threads at once.
#ifndef REDUCER_SERVER_ENGINE_SHARED_BYTES_H_
#define REDUCER_SERVER_ENGINE_SHARED_BYTES_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace reducer {

// Keeps some storage alive; destroyed with the last SharedBytes using it.
class ByteOwner {
 public:
  virtual ~ByteOwner() = default;
  // True when the storage is lent by a peer (a range of a client's shared
  // segment) and must be let go as soon as the engine is done with it:
  // whoever holds bytes longer than the collective holds a copy (Keepable).
  virtual bool lent() const { return false; }
};

// Read-only, contiguous bytes with shared ownership of their storage.
class SharedBytes {
 public:
  SharedBytes() = default;
  // [data, data + size) must stay valid while `owner` lives.
  SharedBytes(std::shared_ptr<const ByteOwner> owner, const char* data,
              size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Bytes [begin, begin + n) of these, sharing the storage.
  SharedBytes Sub(size_t begin, size_t n) const {
    return SharedBytes(owner_, data_ + begin, n);
  }
  const std::shared_ptr<const ByteOwner>& owner() const { return owner_; }

 private:
  std::shared_ptr<const ByteOwner> owner_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// `bytes` when their storage may be held for as long as one likes; else
// (lent storage) a copy in storage of its own.
SharedBytes Keepable(const SharedBytes& bytes);

// One message's worth of bytes, possibly in several pieces (a received
// buffer is). Keeps every piece alive.
class Payload {
 public:
  size_t size() const { return size_; }
  void Append(SharedBytes piece);
  // Copies bytes [begin, begin + n) to `dest`, across pieces.
  void CopyTo(size_t begin, size_t n, void* dest) const;
  void CopyTo(void* dest) const { CopyTo(0, size_, dest); }
  // Bytes [begin, begin + n) (n > 0) sharing their storage, when one piece
  // holds them all; empty SharedBytes when they span pieces.
  SharedBytes Within(size_t begin, size_t n) const;
  // Appends to `out` the pieces holding bytes [begin, begin + n), cut to
  // that range and sharing their storage (several when the range spans
  // pieces).
  void AppendPiecesWithin(size_t begin, size_t n,
                          std::vector<SharedBytes>* out) const;
  const std::vector<SharedBytes>& pieces() const { return pieces_; }

 private:
  std::vector<SharedBytes> pieces_;
  size_t size_ = 0;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_SHARED_BYTES_H_

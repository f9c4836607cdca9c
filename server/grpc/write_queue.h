// WriteQueue: the outgoing side every server stream reactor shares (the
// session stream, a rank's Collective stream, the multiplexed Collectives
// stream). gRPC allows one write in flight per stream; the queue holds the
// rest in order and tracks whether the front is being written. It counts
// the bytes of what is not written yet (the message in flight included),
// as each Push says them: what the stream's client has not taken, which a
// reactor bounds by no longer reading from it (CollectivesReactor).
//
//   if (queue_.Push(std::move(message), size)) StartWrite(&queue_.front());
//   ...
//   void OnWriteDone(bool ok) {
//     Message written = queue_.PopWritten();
//     if (!ok) { queue_.Clear(); return; }
//     if (queue_.TakeNext()) StartWrite(&queue_.front());
//   }
//
// Thread-compatible: the reactor calls it under its own lock.
#ifndef REDUCER_SERVER_GRPC_WRITE_QUEUE_H_
#define REDUCER_SERVER_GRPC_WRITE_QUEUE_H_

#include <cstddef>
#include <deque>
#include <utility>

namespace reducer {

template <typename Item>
class WriteQueue {
 public:
  // Queues `item`, counted as `bytes` until it is written or dropped. True
  // when no write was in flight: the caller must start writing front() now,
  // which the queue counts as in flight from here.
  bool Push(Item item, size_t bytes = 0) {
    items_.push_back(std::move(item));
    sizes_.push_back(bytes);
    unwritten_bytes_ += bytes;
    return TakeNext();
  }

  // The message being (or about to be) written. Not empty().
  Item& front() { return items_.front(); }
  const Item& back() const { return items_.back(); }

  // The front's write completed (successfully or not): removes and returns
  // it; nothing is in flight until TakeNext().
  Item PopWritten() {
    in_flight_ = false;
    Item written = std::move(items_.front());
    items_.pop_front();
    unwritten_bytes_ -= sizes_.front();
    sizes_.pop_front();
    return written;
  }

  // True when a message waits and none is in flight: the caller must start
  // writing front(), now counted as in flight.
  bool TakeNext() {
    if (in_flight_ || items_.empty()) return false;
    in_flight_ = true;
    return true;
  }

  // Drops the messages gRPC does not hold yet: all of them, or all but the
  // front when its write is in flight (that one completes or fails on its
  // own, and gRPC sends the stream's status after it). For a stream that is
  // being finished early.
  void DropUnwritten() {
    const size_t keep = in_flight_ ? 1 : 0;
    while (items_.size() > keep) {
      items_.pop_back();
      unwritten_bytes_ -= sizes_.back();
      sizes_.pop_back();
    }
  }

  // Drops everything; for after a failed write (nothing is in flight).
  void Clear() {
    items_.clear();
    sizes_.clear();
    unwritten_bytes_ = 0;
  }

  bool write_in_flight() const { return in_flight_; }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  // Nothing queued and nothing being written.
  bool idle() const { return !in_flight_ && items_.empty(); }
  // The bytes Push counted for the items still queued, the one in flight
  // included.
  size_t unwritten_bytes() const { return unwritten_bytes_; }

 private:
  std::deque<Item> items_;
  std::deque<size_t> sizes_;  // each item's bytes, in the same order
  size_t unwritten_bytes_ = 0;
  bool in_flight_ = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_WRITE_QUEUE_H_

// WriteQueue: the outgoing side every server stream reactor shares (the
// session stream, a rank's Collective stream, the multiplexed Collectives
// stream). gRPC allows one write in flight per stream; the queue holds the
// rest in order and tracks whether the front is being written.
//
//   if (queue_.Push(std::move(message))) StartWrite(&queue_.front());
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
  // Queues `item`. True when no write was in flight: the caller must start
  // writing front() now, which the queue counts as in flight from here.
  bool Push(Item item) {
    items_.push_back(std::move(item));
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
    if (in_flight_) {
      while (items_.size() > 1) items_.pop_back();
    } else {
      items_.clear();
    }
  }

  // Drops everything; for after a failed write (nothing is in flight).
  void Clear() { items_.clear(); }

  bool write_in_flight() const { return in_flight_; }
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  // Nothing queued and nothing being written.
  bool idle() const { return !in_flight_ && items_.empty(); }

 private:
  std::deque<Item> items_;
  bool in_flight_ = false;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_GRPC_WRITE_QUEUE_H_

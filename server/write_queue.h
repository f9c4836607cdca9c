// What the server's stream reactors share about their queue of outgoing
// messages: one write at a time, from the front of a std::deque.
#ifndef REDUCER_SERVER_WRITE_QUEUE_H_
#define REDUCER_SERVER_WRITE_QUEUE_H_

namespace reducer {

// Drops the queued messages gRPC does not hold yet: all of them, or all but
// the front when its write is in flight (that one completes or fails on its
// own, and gRPC sends the stream's status after it). For a stream that is
// being finished early.
template <typename Deque>
void DropUnwritten(Deque& queue, bool front_write_in_flight) {
  if (front_write_in_flight) {
    while (queue.size() > 1) queue.pop_back();
  } else {
    queue.clear();
  }
}

}  // namespace reducer

#endif  // REDUCER_SERVER_WRITE_QUEUE_H_

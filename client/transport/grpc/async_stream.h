// AsyncStream: the completion-queue scaffolding of one generic gRPC stream
// of the client, shared by every stream the client opens (the session's
// Join stream, the shared Collectives stream, a Collective stream per
// large call). It owns the ClientContext and the call, keeps one read and
// one write in flight (gRPC allows no more), queues the writes behind the
// one in flight, counts the operations gRPC holds, and reports what
// happened to an Observer. What the messages mean stays with the owner.
//
//   class MyCall : AsyncStream::Observer { ... };   // owns mu_ and stream_
//   absl::MutexLock lock(&mu_);
//   stream_.context()->set_deadline(...);
//   stream_.Start(stub, "/reducer.v1.Reducer/Collective");
//   stream_.Write(/*id=*/0, EncodeMessage(...), /*last=*/true);
//   // OnRead for each message, OnWritten(0, ok), OnFinished(status), OnDone().
//   driver->DriveUntil([&] { absl::MutexLock l(&mu_); return stream_.done(); }, ...);
//
// The protocol, step by step:
// 1. Start() starts the call and its first read. The start takes the write
//    slot (gRPC sends the call's start through it), so writes queued
//    meanwhile wait for it; OnStarted(ok) reports it.
// 2. Each read that completes with a message goes to OnRead, then the next
//    read is issued. The first read that fails (the stream is over) goes to
//    OnReadsEnded, and the stream asks gRPC for the call's status (Finish);
//    it comes back through OnFinished.
//    With reads on demand (set_reads_on_demand, before Start), no read is
//    issued at the start, nor after a message unless the observer's
//    WantsMoreReads() says so; ReadIfIdle() issues one. A read left posted
//    while nothing is expected costs a message each way for every answer:
//    gRPC announces the freed flow-control window (WINDOW_UPDATE) in a
//    write of its own. A stream that can write no more (a start or write
//    failed, or Cancel) issues its read itself, so that its end is learned.
// 3. Write() queues a message; the front of the queue is written as soon as
//    the slot is free, `last` ones half-closing the stream. Every queued
//    message is reported once through OnWritten: ok when gRPC wrote it;
//    not ok when its write failed, or it was dropped unwritten because an
//    earlier start or write failed (nothing more is written then) or the
//    stream finished. Unqueue() takes a message back silently.
// 4. OnDone comes last, once the status came back and gRPC holds no
//    operation of the stream: the owner may destroy the stream in it (the
//    stream touches nothing of itself afterwards), and not before.
//
// Thread-safety: guarded by the owner's mutex (given at construction): it
// must be held around every call into the stream; the stream takes it
// around every callback, which runs on the thread polling the client's
// CompletionDriver. Internal to the client library.
#ifndef REDUCER_CLIENT_TRANSPORT_GRPC_ASYNC_STREAM_H_
#define REDUCER_CLIENT_TRANSPORT_GRPC_ASYNC_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/transport/grpc/completion_driver.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace reducer {

class AsyncStream {
 public:
  // What the stream reports. Each callback runs with the owner's mutex held
  // and may call into the stream (Write, Unqueue, Cancel, ...), except that
  // only OnDone may destroy it.
  class Observer {
   public:
    virtual ~Observer() = default;
    // The call's start completed; not ok: the call is over (queued
    // messages are dropped, the read fails and brings the status).
    virtual void OnStarted(bool /*ok*/) {}
    // A message arrived; the stream reads the next one when this returns
    // (with reads on demand: if WantsMoreReads()). `message` may be
    // consumed (left empty).
    virtual void OnRead(grpc::ByteBuffer* message) = 0;
    // With reads on demand, after OnRead: whether another message is
    // expected now.
    virtual bool WantsMoreReads() { return true; }
    // A read failed: no more messages come; the status is requested.
    virtual void OnReadsEnded() {}
    // The queued message `id` was written (ok) or will never be (not ok).
    virtual void OnWritten(uint64_t /*id*/, bool /*ok*/) {}
    // The call's final status, as gRPC reports it.
    virtual void OnFinished(const grpc::Status& status) = 0;
    // The last callback: gRPC holds nothing of the stream any more.
    virtual void OnDone() {}
  };

  // What Unqueue found.
  enum class Unqueued {
    kRemoved,   // it was queued and is gone, unreported
    kInFlight,  // gRPC is writing it: only cancelling the stream ends that
    kAbsent,    // not in the queue (written, dropped, or never queued)
  };

  // `driver`, `mu` and `observer` must outlive the stream. `mu` is the
  // owner's mutex, which guards the stream.
  AsyncStream(CompletionDriver* driver, absl::Mutex* mu, Observer* observer);
  // Destroy only once done() or never started (gRPC must hold nothing).
  ~AsyncStream() = default;
  AsyncStream(const AsyncStream&) = delete;
  AsyncStream& operator=(const AsyncStream&) = delete;

  // The call's context: set its deadline before Start.
  grpc::ClientContext* context() { return &context_; }

  // Reads only when asked (see the protocol above). Before Start.
  void set_reads_on_demand() {
    mu_->AssertHeld();
    reads_on_demand_ = true;
  }

  // Starts `method` on `stub` (which must outlive the call) and, unless
  // reads are on demand, its first read. Once.
  void Start(grpc::GenericStub* stub, const char* method);

  // Issues a read if the stream is started, none is in flight and the
  // reads have not ended.
  void ReadIfIdle();

  // Queues `message` (written in order; `last` half-closes the stream after
  // it, so nothing may be queued behind it). Returns false, dropping the
  // message unreported, when nothing can be written any more (a start or
  // write failed, or the stream finished).
  bool Write(uint64_t id, grpc::ByteBuffer message, bool last);

  // Takes queued message `id` back; see Unqueued.
  Unqueued Unqueue(uint64_t id);

  // Cancels the call: every operation gRPC holds completes promptly.
  void Cancel();

  bool started() const;
  // Start() was called, the status came back, and gRPC holds nothing.
  bool done() const;
  // Once OnFinished was called: the call's status.
  const grpc::Status& status() const;

 private:
  enum class Op { kStart, kRead, kWrite, kFinish };
  struct Tag final : CompletionDriver::Handler {
    Tag(AsyncStream* stream, Op op) : stream(stream), op(op) {}
    void OnComplete(bool ok) override;
    AsyncStream* const stream;
    const Op op;
  };
  struct Outgoing {
    uint64_t id;
    grpc::ByteBuffer message;
    bool last;
  };

  // Handles one completion; returns true when the stream is done (the
  // caller then calls OnDone and touches the stream no more).
  bool HandleEvent(Op op, bool ok);
  // The start or a write ended with `ok`: writes the next queued message,
  // or, when nothing can be written any more, drops the queue.
  void WriteSlotFree(bool ok);
  void WriteFront();
  // Reports every queued message as not written, and empties the queue.
  void DropQueue();

  // Constant after construction.
  CompletionDriver* const driver_;  // not owned
  absl::Mutex* const mu_;           // not owned: the owner's
  Observer* const observer_;        // not owned
  Tag start_tag_{this, Op::kStart};
  Tag read_tag_{this, Op::kRead};
  Tag write_tag_{this, Op::kWrite};
  Tag finish_tag_{this, Op::kFinish};

  // State below is protected by *mu_. gRPC itself is handed the context,
  // the call and the buffers only under it.
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_
      ABSL_GUARDED_BY(mu_);
  int operations_ ABSL_GUARDED_BY(mu_) = 0;  // handed to gRPC, not back yet
  grpc::ByteBuffer incoming_ ABSL_GUARDED_BY(mu_);  // the read in flight
  // In order; the front may be in the write slot.
  std::deque<Outgoing> outgoing_ ABSL_GUARDED_BY(mu_);
  bool write_busy_ ABSL_GUARDED_BY(mu_) = false;  // start or a write in flight
  bool front_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_over_ ABSL_GUARDED_BY(mu_) = false;  // nothing more is written
  bool finished_ ABSL_GUARDED_BY(mu_) = false;     // Finish came back
  bool reads_on_demand_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;       // a read in flight
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;   // a read failed
  grpc::Status status_ ABSL_GUARDED_BY(mu_);       // filled by Finish
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_TRANSPORT_GRPC_ASYNC_STREAM_H_

// The floor under Reducer's small-collective latency: round trips of one
// small message to a gRPC callback server and back, over loopback, measured
// for the ways a client can drive a call. One process serves (--listen), one
// or more measure (--target); nothing Reducer-specific runs, so the figures
// are what gRPC itself costs on this machine.
//
// Modes (--mode):
//   callback_per_call  a new bidi stream per round trip, completions on
//                      gRPC's callback threads (what a callback client does)
//   cq_per_call        a new bidi stream per round trip, driven by the
//                      calling thread on its own CompletionQueue
//   cq_stream          one long-lived bidi stream, one message each way per
//                      round trip, driven by the calling thread; each read
//                      is started once the write has completed
//   cq_stream_preread  the same, with the read started before the write, so
//                      that a read is waiting when the answer arrives, as
//                      Reducer's client streams keep one (gRPC then sends a
//                      flow-control update of its own after every message
//                      read: one more sendmsg, and one more wake-up of the
//                      server, per round trip)
//   callback_stream    one long-lived bidi stream, completions on gRPC's
//                      callback threads
//
// Prints one JSON line: {"mode":...,"bytes":...,"latencies_us":[...]}.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, listen, "", "serve on this address and echo");
ABSL_FLAG(std::string, target, "127.0.0.1:50052", "echo server address");
ABSL_FLAG(std::string, mode, "cq_stream",
          "callback_per_call|cq_per_call|cq_stream|cq_stream_preread|"
          "callback_stream");
ABSL_FLAG(int, bytes, 4, "message size");
ABSL_FLAG(int, iters, 2000, "timed round trips");
ABSL_FLAG(int, warmup, 100, "untimed round trips");
ABSL_FLAG(bool, idle_reader, false,
          "keep a second call blocked on a read on another thread (as a "
          "client's session stream does) while measuring");

namespace {

constexpr char kMethod[] = "/echo.Echo/Stream";
using Clock = std::chrono::steady_clock;

// Server: echoes each message it reads; finishes when the client half-closes.
class EchoReactor final : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&message_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWrite(&message_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer message_;
};

class EchoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new EchoReactor();
  }
};

int Serve(const std::string& address) {
  EchoService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(-1);  // echoes of any --bytes
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return 1;
  std::printf("echo serving on %s\n", address.c_str());
  std::fflush(stdout);
  server->Wait();
  return 0;
}

grpc::ByteBuffer MakeMessage(int bytes) {
  std::string body(bytes, 'x');
  grpc::Slice slice(body);
  return grpc::ByteBuffer(&slice, 1);
}

// Blocks for the next event on `cq`; true if it succeeded.
bool Await(grpc::CompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  return cq->Next(&tag, &ok) && ok;
}

class CallbackRoundTrip final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  CallbackRoundTrip(grpc::GenericStub* stub, const grpc::ByteBuffer& message)
      : out_(message) {
    stub->PrepareBidiStreamingCall(&context_, kMethod, grpc::StubOptions(),
                                   this);
    StartRead(&in_);
    StartWriteLast(&out_, grpc::WriteOptions());
    StartCall();
  }
  void OnReadDone(bool) override {}
  void OnDone(const grpc::Status&) override { done_.Notify(); }
  void Wait() { done_.WaitForNotification(); }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer out_, in_;
  absl::Notification done_;
};

// One long-lived stream; RoundTrip() writes one message and waits for its
// echo.
class CallbackStream final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit CallbackStream(grpc::GenericStub* stub) {
    stub->PrepareBidiStreamingCall(&context_, kMethod, grpc::StubOptions(),
                                   this);
    AddHold();
    StartCall();
  }
  ~CallbackStream() override {
    StartWritesDone();
    RemoveHold();
    closed_.WaitForNotification();
  }
  bool RoundTrip(const grpc::ByteBuffer& message) {
    echoed_ = std::make_unique<absl::Notification>();
    written_ = std::make_unique<absl::Notification>();
    out_ = message;
    StartRead(&in_);
    StartWrite(&out_);
    echoed_->WaitForNotification();
    written_->WaitForNotification();
    return read_ok_;
  }
  void OnReadDone(bool ok) override {
    read_ok_ = ok;
    echoed_->Notify();
  }
  void OnWriteDone(bool) override { written_->Notify(); }
  void OnDone(const grpc::Status&) override { closed_.Notify(); }

 private:
  grpc::ClientContext context_;
  grpc::ByteBuffer out_, in_;
  bool read_ok_ = false;
  std::unique_ptr<absl::Notification> echoed_, written_;
  absl::Notification closed_;
};

bool CqRoundTrip(grpc::GenericStub* stub, grpc::CompletionQueue* cq,
                 const grpc::ByteBuffer& message) {
  grpc::ClientContext context;
  auto call = stub->PrepareCall(&context, kMethod, cq);
  call->StartCall(nullptr);
  if (!Await(cq)) return false;
  call->Write(message, nullptr);
  if (!Await(cq)) return false;
  grpc::ByteBuffer in;
  call->Read(&in, nullptr);
  if (!Await(cq)) return false;
  call->WritesDone(nullptr);
  if (!Await(cq)) return false;
  grpc::Status status;
  call->Finish(&status, nullptr);
  Await(cq);
  return status.ok();
}

// Blocks a thread on a read that never completes until `cq` shuts down,
// on its own channel: what a session stream's reader thread does.
void IdleReader(grpc::CompletionQueue* cq, grpc::ClientContext* context) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(),
                                           args);
  grpc::GenericStub stub(channel);
  auto call = stub.PrepareCall(context, kMethod, cq);
  call->StartCall(nullptr);
  grpc::ByteBuffer in;
  call->Read(&in, nullptr);
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
  }
}

int Measure() {
  grpc::CompletionQueue idle_cq;
  grpc::ClientContext idle_context;
  std::thread idle_thread;
  if (absl::GetFlag(FLAGS_idle_reader)) {
    idle_thread = std::thread(IdleReader, &idle_cq, &idle_context);
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);  // echoes of any --bytes
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(),
                                           channel_args);
  grpc::GenericStub stub(channel);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const grpc::ByteBuffer message = MakeMessage(absl::GetFlag(FLAGS_bytes));
  const int total = absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_iters);
  std::vector<double> latencies;

  grpc::CompletionQueue cq;
  grpc::ClientContext stream_context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
  if (mode == "cq_stream" || mode == "cq_stream_preread") {
    stream = stub.PrepareCall(&stream_context, kMethod, &cq);
    stream->StartCall(nullptr);
    if (!Await(&cq)) return 1;
  }
  std::unique_ptr<CallbackStream> callback_stream;
  if (mode == "callback_stream") {
    callback_stream = std::make_unique<CallbackStream>(&stub);
  }
  for (int i = 0; i < total; ++i) {
    const auto start = Clock::now();
    if (mode == "callback_per_call") {
      CallbackRoundTrip trip(&stub, message);
      trip.Wait();
    } else if (mode == "cq_per_call") {
      if (!CqRoundTrip(&stub, &cq, message)) return 1;
    } else if (mode == "cq_stream_preread") {
      grpc::ByteBuffer in;
      stream->Read(&in, nullptr);
      stream->Write(message, nullptr);
      if (!Await(&cq)) return 1;
      if (!Await(&cq)) return 1;
    } else if (mode == "cq_stream") {
      stream->Write(message, nullptr);
      if (!Await(&cq)) return 1;
      grpc::ByteBuffer in;
      stream->Read(&in, nullptr);
      if (!Await(&cq)) return 1;
    } else if (mode == "callback_stream") {
      if (!callback_stream->RoundTrip(message)) return 1;
    } else {
      std::fprintf(stderr, "unknown --mode %s\n", mode.c_str());
      return 2;
    }
    const std::chrono::duration<double, std::micro> took = Clock::now() - start;
    if (i >= absl::GetFlag(FLAGS_warmup)) latencies.push_back(took.count());
  }
  if (idle_thread.joinable()) {
    idle_context.TryCancel();
    idle_cq.Shutdown();
    idle_thread.join();
  }
  std::printf("{\"mode\":\"%s\",\"bytes\":%d,\"latencies_us\":[%s]}\n",
              mode.c_str(), absl::GetFlag(FLAGS_bytes),
              absl::StrJoin(latencies, ",").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_listen).empty()) {
    return Serve(absl::GetFlag(FLAGS_listen));
  }
  return Measure();
}

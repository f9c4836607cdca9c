// The hostile tenant of bench/tenants_bench.py: with its own token, it does
// to a shared reducerd one of the things reducerd's per-tenant bounds exist
// for (--case), through the wire API directly (tests/raw_client.h) or the
// client library where a legitimate call does the harm:
//
//   unread     a W = 1 job's Collectives stream carrying --calls all-gathers
//              of 1 MiB whose answers it never reads;
//   malformed  a W = 64 job whose rank 0 sends --calls calls with an
//              invalid dtype (reading the answers);
//   jobs       one-rank jobs JOB/j0, JOB/j1, ... Joined until refused or
//              --jobs, all held;
//   memory     two W = 2 jobs JOB/x and JOB/y whose rank 0 each Sends
//              --send_bytes to rank 1, which never receives;
//   silent     --streams Collectives streams opened and left silent, spread
//              over --connections connections;
//   join       a W = 2 job JOB/pair: a Join naming rank 0's session with
//              world size 3, an exact retry of rank 0's Join (held), then
//              all-reduces of the job, each after another wrong Join.
//
// It prints `ENGAGED <what it holds>` once the harm is in place (the driver
// then starts the healthy tenants), keeps it up until its stdin closes,
// then lets go and prints one JSON line {"case":...,"summary":"..."} and
// exits 0 (1 for bad flags, or when it could not even start: its Join
// refused).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "grpcpp/grpcpp.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "proto/reducer/v1/reducer.pb.h"
#include "tests/raw_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "reducerd address");
ABSL_FLAG(std::string, job, "hostile", "the tenant's job name (JOB/...)");
ABSL_FLAG(std::string, token, "", "the tenant's bearer token");
ABSL_FLAG(std::string, case, "",
          "unread, malformed, jobs, memory, silent, join");
ABSL_FLAG(int, calls, 1500, "unread: all-gathers; malformed: calls");
ABSL_FLAG(int, jobs, 1100, "jobs: the most Joins tried");
ABSL_FLAG(int, streams, 1100, "silent: streams opened");
ABSL_FLAG(int, connections, 11,
          "silent: connections the streams are spread over");
ABSL_FLAG(int64_t, send_bytes, int64_t{64} << 20, "memory: bytes per Send");

namespace {

using reducer::testing::JoinRequestFor;
using reducer::testing::RawCallResult;
using reducer::testing::RawSession;
namespace v1 = reducer::v1;

using Stream =
    grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResponse>;

constexpr absl::Duration kJoinTimeout = absl::Seconds(10);

// Set once stdin closes: the driver says let go.
absl::Notification released;

void WaitForStdinToClose() {
  char buffer[256];
  while (read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
  }
  released.Notify();
}

void Engaged(const std::string& what) {
  std::printf("ENGAGED %s\n", what.c_str());
  std::fflush(stdout);
}

void Authorize(grpc::ClientContext* context) {
  const std::string token = absl::GetFlag(FLAGS_token);
  if (!token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
}

std::unique_ptr<v1::Reducer::Stub> NewStub() {
  return v1::Reducer::NewStub(grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(),
      reducer::testing::RawChannelArguments()));
}

absl::StatusOr<std::unique_ptr<RawSession>> JoinAlone(const std::string& job) {
  return RawSession::Join(absl::GetFlag(FLAGS_target), job, 0, 1, kJoinTimeout,
                          absl::GetFlag(FLAGS_token));
}

// Ranks 0..world_size-1 of `job` as raw sessions, joined at once; the first
// refusal when one is refused.
absl::StatusOr<std::vector<std::unique_ptr<RawSession>>> JoinAll(
    const std::string& job, int world_size) {
  std::vector<absl::StatusOr<std::unique_ptr<RawSession>>> joined(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      joined[r] =
          RawSession::Join(absl::GetFlag(FLAGS_target), job, r, world_size,
                           kJoinTimeout, absl::GetFlag(FLAGS_token));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<RawSession>> sessions;
  for (auto& j : joined) {
    if (!j.ok()) return j.status();
    sessions.push_back(*std::move(j));
  }
  return sessions;
}

// A Join stream, open until destroyed; `status` OK once JobReady came
// within kJoinTimeout, else the stream's end (or DEADLINE_EXCEEDED: no
// answer, the stream then cancelled).
struct HeldJoin {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::JoinEvent>> reader;
  absl::Status status;

  HeldJoin(v1::Reducer::Stub* stub, const v1::JoinRequest& request) {
    Authorize(&context);
    reader = stub->Join(&context, request);
    v1::JoinEvent event;
    bool got = false;
    absl::Notification first;
    std::thread read([&] {
      // JoinWaiting events come before JobReady while the job gathers.
      do {
        got = reader->Read(&event);
      } while (got && event.has_waiting());
      first.Notify();
    });
    const bool answered = first.WaitForNotificationWithTimeout(kJoinTimeout);
    if (!answered) context.TryCancel();
    read.join();
    if (got && event.has_ready()) return;
    const grpc::Status end = reader->Finish();
    reader.reset();
    status =
        answered
            ? absl::Status(static_cast<absl::StatusCode>(end.error_code()),
                           end.error_message())
            : absl::DeadlineExceededError(absl::StrCat(
                  "no JobReady within ", absl::FormatDuration(kJoinTimeout)));
    if (status.ok()) status = absl::UnknownError("Join ended without JobReady");
  }
  ~HeldJoin() {
    if (reader == nullptr) return;
    context.TryCancel();
    reader->Finish();
  }
};

std::string Unread() {
  absl::StatusOr<std::unique_ptr<RawSession>> raw =
      JoinAlone(absl::GetFlag(FLAGS_job) + "/unread");
  if (!raw.ok()) return absl::StrCat("Join refused: ", raw.status().ToString());
  constexpr int64_t kElements = (int64_t{1} << 20) / 4;
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub();
  grpc::ClientContext context;
  Authorize(&context);
  std::unique_ptr<Stream> stream = stub->Collectives(&context);
  v1::CollectiveRequest request;
  *request.mutable_header() = (*raw)->Header(v1::COLLECTIVE_KIND_ALL_GATHER);
  v1::TensorSpec* spec = request.mutable_header()->add_tensors();
  spec->set_dtype(v1::DATA_TYPE_FLOAT32);
  spec->add_shape(kElements);
  request.set_data(std::string(4 * kElements, '\0'));
  const int calls = absl::GetFlag(FLAGS_calls);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < calls && !released.HasBeenNotified(); ++i) {
      request.set_call_id(i + 1);
      request.mutable_header()->set_sequence(i);
      request.mutable_header()->set_attempt_id(absl::StrCat("unread-", i));
      if (!stream->Write(request)) break;
      written.fetch_add(1);
    }
  });
  absl::SleepFor(absl::Seconds(1));
  Engaged(absl::StrCat("a stream that never reads, ", written.load(),
                       " all-gathers of 1 MiB written so far"));
  released.WaitForNotification();
  context.TryCancel();
  writer.join();
  return absl::StrCat("wrote ", written.load(), " of ", calls,
                      " all-gathers of 1 MiB and read no answer");
}

std::string Malformed() {
  constexpr int kWorld = 64;
  absl::StatusOr<std::vector<std::unique_ptr<RawSession>>> sessions =
      JoinAll(absl::GetFlag(FLAGS_job) + "/wide", kWorld);
  if (!sessions.ok()) {
    return absl::StrCat("Join refused: ", sessions.status().ToString());
  }
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub();
  grpc::ClientContext context;
  Authorize(&context);
  std::unique_ptr<Stream> stream = stub->Collectives(&context);
  std::atomic<int> answered{0};
  std::thread reader([&] {
    v1::CollectiveResponse response;
    while (stream->Read(&response)) {
      if (response.has_status()) answered.fetch_add(1);
    }
  });
  v1::CollectiveRequest request = (*sessions)[0]->AllReduceRequest({4});
  request.mutable_header()->mutable_tensors(0)->set_dtype(
      static_cast<v1::DataType>(99));
  request.set_data(std::string(16, '\0'));
  const int calls = absl::GetFlag(FLAGS_calls);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < calls && !released.HasBeenNotified(); ++i) {
      request.set_call_id(i + 1);
      request.mutable_header()->set_sequence(i);
      request.mutable_header()->set_attempt_id(absl::StrCat("malformed-", i));
      if (!stream->Write(request)) break;
      written.fetch_add(1);
    }
    stream->WritesDone();
  });
  absl::SleepFor(absl::Seconds(1));
  Engaged(absl::StrCat("a flood of calls with an invalid dtype, ",
                       written.load(), " sent so far"));
  released.WaitForNotification();
  context.TryCancel();
  writer.join();
  reader.join();
  stream->Finish();
  return absl::StrCat("sent ", written.load(), " calls with dtype 99 on a ",
                      kWorld, "-rank job; ", answered.load(), " answered");
}

std::string Jobs() {
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub();
  std::vector<std::unique_ptr<HeldJoin>> held;
  std::string refusal = "none";
  for (int i = 0; i < absl::GetFlag(FLAGS_jobs); ++i) {
    auto join = std::make_unique<HeldJoin>(
        stub.get(),
        JoinRequestFor(absl::StrCat(absl::GetFlag(FLAGS_job), "/j", i), 0, 1,
                       absl::StrCat("hostile-session-", i)));
    if (!join->status.ok()) {
      refusal = join->status.ToString();
      break;
    }
    held.push_back(std::move(join));
  }
  Engaged(absl::StrCat(held.size(), " one-rank jobs"));
  released.WaitForNotification();
  return absl::StrCat("held ", held.size(), " jobs; refused then: ", refusal);
}

std::string Memory() {
  const int64_t send_bytes = absl::GetFlag(FLAGS_send_bytes);
  std::vector<std::string> outcomes;
  // Each job's two clients; kept until the end so the sends stay held.
  std::vector<std::unique_ptr<reducer::Client>> clients;
  const std::vector<float> data(send_bytes / 4, 1.0f);
  for (const char* suffix : {"/x", "/y"}) {
    const std::string job = absl::GetFlag(FLAGS_job) + suffix;
    std::vector<absl::StatusOr<std::unique_ptr<reducer::Client>>> ranks(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        reducer::ClientOptions options;
        options.target = absl::GetFlag(FLAGS_target);
        options.job = job;
        options.rank = r;
        options.world_size = 2;
        options.token = absl::GetFlag(FLAGS_token);
        // A message nobody receives is dropped at its deadline: hold it.
        options.timeout = absl::Hours(1);
        options.shared_memory = reducer::SharedMemory::kOff;
        ranks[r] = reducer::Client::Connect(options);
      });
    }
    for (std::thread& t : threads) t.join();
    if (!ranks[0].ok() || !ranks[1].ok()) {
      outcomes.push_back(absl::StrCat(
          job, ": Connect: ",
          (ranks[0].ok() ? ranks[1] : ranks[0]).status().ToString()));
      continue;
    }
    const absl::Status sent = (*ranks[0])->Send(
        reducer::TensorView::Of<float>(data), /*destination=*/1);
    outcomes.push_back(absl::StrCat(job, ": Send of ", send_bytes,
                                    " bytes: ", sent.ToString()));
    for (auto& r : ranks) clients.push_back(*std::move(r));
  }
  Engaged(absl::StrCat("sends nobody receives: ", outcomes[0], "; ",
                       outcomes.size() > 1 ? outcomes[1] : ""));
  released.WaitForNotification();
  return absl::StrCat(outcomes[0], "; ",
                      outcomes.size() > 1 ? outcomes[1] : "");
}

std::string Silent() {
  struct SilentStream {
    grpc::ClientContext context;
    std::unique_ptr<Stream> stream;
  };
  std::vector<std::unique_ptr<v1::Reducer::Stub>> stubs;
  for (int c = 0; c < std::max(1, absl::GetFlag(FLAGS_connections)); ++c) {
    stubs.push_back(NewStub());
  }
  std::vector<std::unique_ptr<SilentStream>> silent;
  const int streams = absl::GetFlag(FLAGS_streams);
  for (int i = 0; i < streams; ++i) {
    auto s = std::make_unique<SilentStream>();
    Authorize(&s->context);
    s->stream = stubs[i % stubs.size()]->Collectives(&s->context);
    silent.push_back(std::move(s));
  }
  Engaged(absl::StrCat(streams, " silent Collectives streams over ",
                       stubs.size(), " connections"));
  released.WaitForNotification();
  for (auto& s : silent) s->context.TryCancel();
  for (auto& s : silent) s->stream->Finish();
  return absl::StrCat("held ", streams, " silent Collectives streams");
}

// One all-reduce of zeros over both sessions, number `sequence`; the first
// failure, or OK.
absl::Status AllReducePair(
    const std::vector<std::unique_ptr<RawSession>>& ranks, uint64_t sequence) {
  std::vector<RawCallResult> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      v1::CollectiveRequest request = ranks[r]->AllReduceRequest({256});
      request.mutable_header()->set_sequence(sequence);
      request.set_data(std::string(1024, '\0'));
      results[r] = ranks[r]->Call({request}, absl::Seconds(10));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const RawCallResult& result : results) {
    if (!result.status.ok()) return result.status;
  }
  return absl::OkStatus();
}

std::string Join() {
  const std::string job = absl::GetFlag(FLAGS_job) + "/pair";
  absl::StatusOr<std::vector<std::unique_ptr<RawSession>>> ranks =
      JoinAll(job, 2);
  if (!ranks.ok())
    return absl::StrCat("Join refused: ", ranks.status().ToString());
  std::unique_ptr<v1::Reducer::Stub> stub = NewStub();
  const std::string session = (*ranks)[0]->session_id();
  const absl::Status wrong =
      HeldJoin(stub.get(), JoinRequestFor(job, 0, 3, session)).status;
  const absl::Status after_wrong = AllReducePair(*ranks, 0);
  HeldJoin retry(stub.get(), JoinRequestFor(job, 0, 2, session));
  const absl::Status after_retry = AllReducePair(*ranks, 1);
  Engaged("a job whose rank 0's session other Joins name");
  int rounds = 0;
  int failed = 0;
  for (uint64_t sequence = 2; !released.HasBeenNotified(); ++sequence) {
    HeldJoin again(stub.get(), JoinRequestFor(job, 0, 3, session));
    if (!AllReducePair(*ranks, sequence).ok()) ++failed;
    absl::SleepFor(absl::Milliseconds(20));
    ++rounds;
  }
  return absl::StrCat(
      "Join of world size 3 naming rank 0's session: ", wrong.ToString(),
      "; the job's all-reduce after it: ", after_wrong.ToString(),
      "; rank 0's exact retry: ", retry.status.ToString(),
      "; all-reduce after it: ", after_retry.ToString(), "; then ", failed,
      " of ", rounds, " all-reduces failed, each after another such Join");
}

// JSON string literal of `s`.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string which = absl::GetFlag(FLAGS_case);
  std::string (*run)() = nullptr;
  if (which == "unread") run = Unread;
  if (which == "malformed") run = Malformed;
  if (which == "jobs") run = Jobs;
  if (which == "memory") run = Memory;
  if (which == "silent") run = Silent;
  if (which == "join") run = Join;
  if (run == nullptr) {
    std::fprintf(stderr,
                 "hostile_tenant: --case must be unread, malformed, jobs, "
                 "memory, silent or join, not '%s'\n",
                 which.c_str());
    return 1;
  }
  std::thread stdin_watch(WaitForStdinToClose);
  stdin_watch.detach();
  const std::string summary = run();
  std::printf("{\"case\":%s,\"summary\":%s}\n", Quoted(which).c_str(),
              Quoted(summary).c_str());
  std::fflush(stdout);
  return 0;
}

// Transport security and job credentials, with real processes: reducerd
// serving TLS and mutual TLS from certificates made at test time by the
// openssl command (tests/make_test_certs.sh), certificates rotated by
// symlink swap under a live session, per-job tokens (missing, another
// job's, rotated), garbage and stalled handshakes on the TLS port, the
// plaintext health port, the client's message for each TLS mismatch, and
// reducerctl over TLS with a job's token seeing only that job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/reducer/v1/reducer.grpc.pb.h"
#include "tests/fault_test_base.h"
#include "tests/process_harness.h"
#include "tests/raw_client.h"
#include "tests/token_hash.h"

namespace reducer {
namespace testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTokenA[] = "token-of-job-a-7f3e9c";
constexpr char kTokenB[] = "token-of-job-b-41d2aa";
constexpr char kTokenA2[] = "rotated-token-of-job-a-0b77";

// Output of `command` run by /bin/sh (stdout only).
std::string RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// Writes `text` to `path` as Kubernetes updates a Secret: into a new file,
// then a new symlink renamed over `path`.
void SwapSymlink(const std::string& path, const std::string& target) {
  const std::string tmp = path + ".swap";
  std::remove(tmp.c_str());
  ASSERT_EQ(symlink(target.c_str(), tmp.c_str()), 0) << tmp;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// The subject CN of the certificate reducerd at `address` presents now, as
// the openssl command sees it.
std::string PresentedSubject(const std::string& address) {
  return RunCommand(absl::StrCat(
      "timeout 5 openssl s_client -connect ", address,
      " </dev/null 2>/dev/null | openssl x509 -noout -subject 2>/dev/null"));
}

// grpc.health.v1.Health/Check for the whole server ("") at `address` over
// plaintext: 1 SERVING, 2 NOT_SERVING (HealthCheckResponse.status), or -1
// with the call failing (e.g. the port is gone).
int HealthStatus(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""}: no bytes
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // Field 1, varint: 0x08 then the enum value.
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;  // 0: UNKNOWN (the default is not encoded)
}

class SecurityTest : public FaultTest {
 protected:
  void SetUp() override {
    FaultTest::SetUp();
    certs_ = absl::StrCat(scratch_dir_, "/certs");
    absl::StatusOr<std::string> script = RunfilePath("tests/make_test_certs.sh");
    ASSERT_TRUE(script.ok()) << script.status();
    ASSERT_EQ(std::system(absl::StrCat("bash ", *script, " ", certs_).c_str()), 0);
  }

  std::string Cert(const std::string& name) const {
    return absl::StrCat(certs_, "/", name);
  }
  std::vector<std::string> TlsServerFlags() const {
    return {"--tls_cert_file=" + Cert("server.pem"),
            "--tls_key_file=" + Cert("server.key")};
  }
  // Worker flags: TLS trusting the test CA, with the named client
  // certificate ("" for none).
  std::vector<std::string> TlsWorkerFlags(const std::string& client = "") const {
    std::vector<std::string> flags = {"--tls_ca_file=" + Cert("ca.pem")};
    if (!client.empty()) {
      flags.push_back("--tls_cert_file=" + Cert(client + ".pem"));
      flags.push_back("--tls_key_file=" + Cert(client + ".key"));
    }
    return flags;
  }
  // Starts ranks 0..world_size-1 of `job`, each running `steps` with
  // `flags` added and a 10 s timeout.
  std::vector<std::unique_ptr<ChildProcess>> StartJobWith(
      const std::string& job, int world_size, const std::string& steps,
      std::vector<std::string> flags) {
    flags.push_back("--timeout_s=10");
    return StartJob(job, world_size, {steps}, {}, flags);
  }
  // One rank-0-of-1 worker of `job` that only connects; its result.
  ProcessResult ConnectOnce(const std::string& job,
                            const std::vector<std::string>& flags,
                            const std::string& target = "") {
    WorkerSpec spec;
    spec.job = job;
    spec.steps = "allreduce";
    spec.target = target;
    spec.extra_flags = flags;
    spec.extra_flags.push_back("--timeout_s=10");
    spec.name = absl::StrCat(job, ".probe", probes_++);
    std::vector<std::unique_ptr<ChildProcess>> one;
    one.push_back(StartWorker(spec));
    return WaitWorkers(one, absl::Seconds(30))[0];
  }
  // A tokens file naming jobs A and B with their tokens' hashes.
  std::string WriteTokens(const std::string& name, const std::string& token_a) {
    const std::string path = absl::StrCat(scratch_dir_, "/", name);
    WriteFile(path, absl::StrCat("# job sha256\n", Job("a"), " ",
                                 Sha256Hex(token_a), "\n", Job("b"), " ",
                                 Sha256Hex(kTokenB), "\n"));
    return path;
  }

  std::string certs_;
  int probes_ = 0;
};

// A W=2 job over TLS: small calls (the shared Collectives stream) and one
// over 1 MiB (a stream of its own, in chunks) reduce to the closed form.
TEST_F(SecurityTest, TlsJobReducesCorrectly) {
  ASSERT_TRUE(StartServer(TlsServerFlags()));
  auto workers = StartJobWith(
      Job(), 2, "allreduce;allreduce:shape=600000;many:count=3;broadcast:root=1;barrier",
      TlsWorkerFlags());
  std::vector<ProcessResult> done = WaitWorkers(workers);
  for (const ProcessResult& w : done) {
    for (const char* step : {"0", "1", "2", "3", "4"}) {
      ExpectStep(w, step, absl::StatusCode::kOk);
    }
    ExpectStep(w, "5", absl::StatusCode::kOk, {}, absl::InfiniteDuration(), false);
  }
}

// Mutual TLS: only a certificate of the trusted CA, valid now, gets in;
// the refused ones fail Connect at once with a message naming the cause.
TEST_F(SecurityTest, MutualTlsRefusesMissingForeignAndExpiredCertificates) {
  std::vector<std::string> flags = TlsServerFlags();
  flags.push_back("--tls_client_ca_file=" + Cert("ca.pem"));
  ASSERT_TRUE(StartServer(flags));
  ProcessResult good = ConnectOnce(Job("good"), TlsWorkerFlags("client"));
  ExpectStep(good, "0", absl::StatusCode::kOk);
  ExpectStep(good, "1", absl::StatusCode::kOk);
  ProcessResult none = ConnectOnce(Job("none"), TlsWorkerFlags());
  ExpectStep(none, "0", absl::StatusCode::kFailedPrecondition,
             {server()->address(), "requires mutual TLS", "tls.cert_file"},
             absl::Seconds(5));
  ProcessResult other = ConnectOnce(Job("other"), TlsWorkerFlags("other_client"));
  ExpectStep(other, "0", absl::StatusCode::kFailedPrecondition,
             {"refused this client's certificate", "other_ca"}, absl::Seconds(5));
  ProcessResult expired = ConnectOnce(Job("expired"), TlsWorkerFlags("expired_client"));
  ExpectStep(expired, "0", absl::StatusCode::kFailedPrecondition,
             {"refused this client's certificate", "has expired"},
             absl::Seconds(5));
  // Refusal happens at the handshake: none of them got as far as a call.
  for (const ProcessResult* w : {&none, &other, &expired}) {
    EXPECT_FALSE(ParseStepResults(w->stdout_text).contains("1")) << w->Describe();
  }
}

// reducerd's certificate is a symlink swapped to a new one while a job's
// session stays open: new connections get the new certificate, the open
// session keeps reducing, nothing restarts.
TEST_F(SecurityTest, CertificateRotatedBySymlinkSwapKeepsSessionsGoing) {
  const std::string cert = absl::StrCat(scratch_dir_, "/tls.crt");
  const std::string key = absl::StrCat(scratch_dir_, "/tls.key");
  SwapSymlink(cert, Cert("server.pem"));
  SwapSymlink(key, Cert("server.key"));
  ASSERT_TRUE(StartServer({"--tls_cert_file=" + cert, "--tls_key_file=" + key,
                           "--tls_refresh_interval=1s"}));
  const pid_t pid = server()->pid();
  EXPECT_THAT(PresentedSubject(server()->address()), HasSubstr("CN = server\n"));
  auto workers = StartJobWith(
      Job(), 2,
      "allreduce;wait_file:path=rotated;allreduce;allreduce:shape=600000;barrier",
      TlsWorkerFlags());
  // Swap the key first, as a Secret update would replace both at once; the
  // provider reads the pair again together.
  ASSERT_TRUE(WaitForOutput(*workers[0], "RESULT 1 "));
  SwapSymlink(key, Cert("server2.key"));
  SwapSymlink(cert, Cert("server2.pem"));
  std::string subject;
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  while (absl::Now() < give_up) {
    subject = PresentedSubject(server()->address());
    if (absl::StrContains(subject, "CN = server2")) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_THAT(subject, HasSubstr("CN = server2"));
  Touch("rotated");
  std::vector<ProcessResult> done = WaitWorkers(workers);
  for (const ProcessResult& w : done) {
    for (const char* step : {"0", "1", "3", "4"}) {
      ExpectStep(w, step, absl::StatusCode::kOk);
    }
  }
  // A new worker gets in under the new certificate.
  ProcessResult fresh = ConnectOnce(Job("fresh"), TlsWorkerFlags());
  ExpectStep(fresh, "1", absl::StatusCode::kOk);
  EXPECT_EQ(server()->pid(), pid);
}

// A collective stream is checked for a known token before it takes one of
// --max_concurrent_calls' slots: a silent stream with a token no job has is
// refused at once, and a job's call gets the only slot.
TEST_F(SecurityTest, StreamWithAnUnknownTokenTakesNoSlot) {
  ASSERT_TRUE(StartServer({"--job_tokens_file=" + WriteTokens("tokens", kTokenA),
                           "--max_concurrent_calls=1"}));
  std::unique_ptr<v1::Reducer::Stub> stub = v1::Reducer::NewStub(
      grpc::CreateChannel(server()->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext silent;
  silent.AddMetadata("authorization", "Bearer not-a-token");
  silent.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto stream = stub->Collective(&silent);  // opened, and no header sent
  absl::SleepFor(absl::Milliseconds(300));

  absl::StatusOr<std::unique_ptr<RawSession>> raw = RawSession::Join(
      server()->address(), Job("a"), 0, 1, absl::Seconds(30), kTokenA);
  ASSERT_TRUE(raw.ok()) << raw.status();
  v1::CollectiveRequest request = (*raw)->AllReduceRequest({4});
  request.set_data(std::string(16, '\0'));
  const RawCallResult call = (*raw)->Call({request}, absl::Seconds(10));
  EXPECT_TRUE(call.status.ok()) << call.status;

  const grpc::Status refused = stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("not one reducerd knows"));
}

// Tokens: job B runs while a call without a token is UNAUTHENTICATED and
// job A's token on job B is PERMISSION_DENIED; B never notices. Then A's
// token is rotated (file swapped by symlink): A's live session is refused
// on its next collective, the new token gets in, B goes on throughout.
// No token ever appears in reducerd's log.
TEST_F(SecurityTest, TokensGuardEachJobAndRotate) {
  const std::string tokens = absl::StrCat(scratch_dir_, "/tokens");
  SwapSymlink(tokens, WriteTokens("tokens.v1", kTokenA));
  ASSERT_TRUE(StartServer({"--job_tokens_file=" + tokens}));
  const std::string token_b = absl::StrCat("--token=", kTokenB);
  auto job_b = StartJobWith(
      Job("b"), 2,
      "allreduce;wait_file:path=intruded;allreduce;allreduce:shape=600000;"
      "wait_file:path=rotated;allreduce;barrier",
      {token_b});
  auto job_a = StartJobWith(
      Job("a"), 1,
      "allreduce;wait_file:path=rotated;sleep:ms=1500;allreduce;"
      "allreduce:shape=600000",
      {absl::StrCat("--token=", kTokenA)});
  ASSERT_TRUE(WaitForOutput(*job_b[0], "RESULT 1 "));

  ProcessResult missing = ConnectOnce(Job("b"), {});
  ExpectStep(missing, "0", absl::StatusCode::kUnauthenticated,
             {Job("b"), "ClientOptions::token"});
  ProcessResult wrong_job = ConnectOnce(Job("b"), {absl::StrCat("--token=", kTokenA)});
  ExpectStep(wrong_job, "0", absl::StatusCode::kPermissionDenied,
             {Job("b"), "another job"});
  ProcessResult unknown = ConnectOnce(Job("b"), {"--token=not-a-token"});
  ExpectStep(unknown, "0", absl::StatusCode::kUnauthenticated, {"not one reducerd knows"});
  Touch("intruded");

  SwapSymlink(tokens, WriteTokens("tokens.v2", kTokenA2));
  Touch("rotated");
  std::vector<ProcessResult> a = WaitWorkers(job_a);
  ExpectStep(a[0], "1", absl::StatusCode::kOk);
  // Sent with the old token after the file changed: both stream kinds check.
  ExpectStep(a[0], "4", absl::StatusCode::kUnauthenticated, {Job("a")});
  ExpectStep(a[0], "5", absl::StatusCode::kUnauthenticated, {Job("a")});
  ProcessResult old_token = ConnectOnce(Job("a"), {absl::StrCat("--token=", kTokenA)});
  ExpectStep(old_token, "0", absl::StatusCode::kUnauthenticated);
  ProcessResult new_token = ConnectOnce(Job("a"), {absl::StrCat("--token=", kTokenA2)});
  ExpectStep(new_token, "1", absl::StatusCode::kOk);

  std::vector<ProcessResult> b = WaitWorkers(job_b);
  for (const ProcessResult& w : b) {
    for (const char* step : {"0", "1", "3", "4", "6", "7"}) {
      ExpectStep(w, step, absl::StatusCode::kOk);
    }
  }
  const std::string logs = server()->Logs();
  for (const char* token : {kTokenA, kTokenB, kTokenA2, "not-a-token"}) {
    EXPECT_THAT(logs, Not(HasSubstr(token)));
  }
  EXPECT_THAT(logs, HasSubstr("re-read --job_tokens_file"));
}

// How one Collective (or, with `many`, Collectives) stream that sends
// `requests` with `token` (empty: no authorization metadata) ended: its
// final status, or, on a Collectives stream that ended OK, the status of
// the first call answered with an error.
grpc::Status RunStream(v1::Reducer::Stub* stub, const std::string& token,
                       const std::vector<v1::CollectiveRequest>& requests,
                       bool many) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  auto stream = many ? stub->Collectives(&context) : stub->Collective(&context);
  for (const v1::CollectiveRequest& r : requests) {
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  v1::CollectiveResponse response;
  grpc::Status call_status;
  while (stream->Read(&response)) {
    if (response.has_status() && response.status().code() != 0 && call_status.ok()) {
      call_status = grpc::Status(
          static_cast<grpc::StatusCode>(response.status().code()),
          response.status().message());
    }
  }
  grpc::Status final_status = stream->Finish();
  return final_status.ok() ? call_status : final_status;
}

// Hand-made calls, as a client that skips the library would send them:
// collective streams and Leave are checked as Join is.
TEST_F(SecurityTest, CollectiveStreamsAndLeaveCheckTheToken) {
  const std::string tokens = WriteTokens("tokens", kTokenA);
  ASSERT_TRUE(StartServer({"--job_tokens_file=" + tokens}));
  auto stub = v1::Reducer::NewStub(
      grpc::CreateChannel(server()->address(), grpc::InsecureChannelCredentials()));
  v1::CollectiveRequest request;
  v1::CollectiveHeader* header = request.mutable_header();
  header->set_job(Job("b"));
  header->set_kind(v1::COLLECTIVE_KIND_ALL_REDUCE);
  header->set_timeout_ms(5000);
  header->set_attempt_id("a1");
  request.set_call_id(1);
  for (bool many : {false, true}) {
    SCOPED_TRACE(many ? "Collectives" : "Collective");
    grpc::Status none = RunStream(stub.get(), "", {request}, many);
    EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(none.error_message(), HasSubstr("no `authorization: Bearer TOKEN`"));
    grpc::Status other = RunStream(stub.get(), kTokenA, {request}, many);
    EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << other.error_message();
    EXPECT_THAT(other.error_message(), HasSubstr("another job"));
  }
  v1::LeaveRequest leave;
  leave.set_job(Job("b"));
  leave.set_session_id("not-a-session");
  v1::LeaveResponse response;
  {
    grpc::ClientContext context;
    EXPECT_EQ(stub->Leave(&context, leave, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kTokenA));
    EXPECT_EQ(stub->Leave(&context, leave, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kTokenB));
    EXPECT_TRUE(stub->Leave(&context, leave, &response).ok());
  }
}

// Garbage bytes and a connection that never sends its ClientHello, held
// open on the TLS port, while a job reduces over TLS.
TEST_F(SecurityTest, GarbageAndStalledHandshakesDoNotDisturbOtherJobs) {
  ASSERT_TRUE(StartServer(TlsServerFlags()));
  const int stalled = ConnectLoopback(server()->port());
  ASSERT_GE(stalled, 0);
  std::vector<int> garbage;
  for (int i = 0; i < 8; ++i) {
    const int fd = ConnectLoopback(server()->port());
    ASSERT_GE(fd, 0);
    std::string junk(4096, '\0');
    for (size_t j = 0; j < junk.size(); ++j) junk[j] = static_cast<char>(j * 131 + i);
    if (i % 2 == 0) junk.replace(0, 3, "\x16\x03\x01");  // a bogus TLS record
    EXPECT_GT(write(fd, junk.data(), junk.size()), 0);
    garbage.push_back(fd);
  }
  auto workers = StartJobWith(Job(), 2,
                              "allreduce;allreduce:shape=600000;many:count=4;barrier",
                              TlsWorkerFlags());
  std::vector<ProcessResult> done = WaitWorkers(workers, absl::Seconds(30));
  for (const ProcessResult& w : done) {
    for (const char* step : {"0", "1", "2", "3"}) {
      ExpectStep(w, step, absl::StatusCode::kOk, {}, absl::Seconds(10));
    }
  }
  for (int fd : garbage) close(fd);
  close(stalled);
  ProcessResult after = ConnectOnce(Job("after"), TlsWorkerFlags());
  ExpectStep(after, "1", absl::StatusCode::kOk);
}

// The plaintext health port of a TLS reducerd answers SERVING, and
// NOT_SERVING while it drains after SIGTERM.
TEST_F(SecurityTest, HealthPortFollowsServingStateInPlaintext) {
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string health = absl::StrCat("127.0.0.1:", *port);
  std::vector<std::string> flags = TlsServerFlags();
  flags.push_back("--health_listen=" + health);
  flags.push_back("--drain_budget=4s");
  ASSERT_TRUE(StartServer(flags));
  EXPECT_EQ(HealthStatus(health), 1);
  // The main port speaks only TLS: a plaintext health check there fails.
  EXPECT_EQ(HealthStatus(server()->address()), -1);
  // A collective waiting for a rank that never comes keeps the drain going.
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < 2; ++r) {
    WorkerSpec spec;
    spec.job = Job();
    spec.rank = r;
    spec.world_size = 2;
    spec.steps = r == 0 ? "allreduce:timeout_ms=8000" : "hang";
    spec.extra_flags = TlsWorkerFlags();
    workers.push_back(StartWorker(spec));
  }
  ASSERT_TRUE(WaitForOutput(*workers[0], "BEGIN 1 "));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(kill(server()->pid(), SIGTERM), 0);
  int seen = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(3);
  while (absl::Now() < give_up && (seen = HealthStatus(health)) != 2) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(seen, 2) << "expected NOT_SERVING during the drain";
  workers[0]->Wait(absl::Seconds(15));
}

// What Connect says for each TLS mismatch, naming the target and the fix.
TEST_F(SecurityTest, ClientNamesEachTlsMismatch) {
  ASSERT_TRUE(StartServer(TlsServerFlags()));
  absl::StatusOr<std::unique_ptr<ReducerdProcess>> plain = ReducerdProcess::Start();
  ASSERT_TRUE(plain.ok()) << plain.status();

  ProcessResult plaintext_client = ConnectOnce(Job("p"), {});
  ExpectStep(plaintext_client, "0", absl::StatusCode::kFailedPrecondition,
             {server()->address(), "serves TLS", "ClientOptions::tls is unset"},
             absl::Seconds(5));
  ProcessResult tls_client = ConnectOnce(Job("t"), TlsWorkerFlags(), (*plain)->address());
  ExpectStep(tls_client, "0", absl::StatusCode::kFailedPrecondition,
             {(*plain)->address(), "does not speak TLS", "--tls_cert_file"},
             absl::Seconds(5));
  ProcessResult untrusted = ConnectOnce(
      Job("u"), {"--tls_ca_file=" + Cert("other_ca.pem")});
  ExpectStep(untrusted, "0", absl::StatusCode::kFailedPrecondition,
             {server()->address(), "does not trust", "other_ca.pem"},
             absl::Seconds(5));
  ProcessResult misnamed = ConnectOnce(
      Job("m"), {"--tls_ca_file=" + Cert("ca.pem"), "--tls_server_name=db.example"});
  ExpectStep(misnamed, "0", absl::StatusCode::kFailedPrecondition,
             {server()->address(), "[localhost, 127.0.0.1]", "\"db.example\""},
             absl::Seconds(5));
  // The name given in tls.server_name is the one checked: "localhost" is
  // in the certificate, so this connects to 127.0.0.1 fine.
  ProcessResult renamed = ConnectOnce(
      Job("r"), {"--tls_ca_file=" + Cert("ca.pem"), "--tls_server_name=localhost"});
  ExpectStep(renamed, "1", absl::StatusCode::kOk);
  EXPECT_TRUE((*plain)->Stop(absl::Seconds(10)).Succeeded());
}

// reducerctl against a TLS reducerd with tokens, jobs A and B running: no
// token or an unknown one is UNAUTHENTICATED, A's token (from a file) shows
// job A and nothing of B, B's the other way round; health and services work
// over TLS, health on the plaintext health port too; a plaintext reducerctl
// is told the port serves TLS. No token reaches reducerd's log.
TEST_F(SecurityTest, ReducerctlObeysTlsAndShowsOnlyTheTokensJob) {
  absl::StatusOr<std::string> ctl = RunfilePath("tools/reducerctl");
  ASSERT_TRUE(ctl.ok()) << ctl.status();
  absl::StatusOr<int> port = PickFreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string health = absl::StrCat("127.0.0.1:", *port);
  std::vector<std::string> flags = TlsServerFlags();
  flags.push_back("--job_tokens_file=" + WriteTokens("tokens", kTokenA));
  flags.push_back("--health_listen=" + health);
  ASSERT_TRUE(StartServer(flags));
  std::vector<std::string> tls_a = TlsWorkerFlags();
  tls_a.push_back(absl::StrCat("--token=", kTokenA));
  std::vector<std::string> tls_b = TlsWorkerFlags();
  tls_b.push_back(absl::StrCat("--token=", kTokenB));
  auto job_a = StartJobWith(Job("a"), 1, "allreduce;wait_file:path=seen;barrier", tls_a);
  auto job_b = StartJobWith(Job("b"), 1, "allreduce;wait_file:path=seen;barrier", tls_b);
  ASSERT_TRUE(WaitForOutput(*job_a[0], "RESULT 1 "));
  ASSERT_TRUE(WaitForOutput(*job_b[0], "RESULT 1 "));

  const std::string target = "--target=" + server()->address();
  const std::string ca = "--tls_ca_file=" + Cert("ca.pem");
  const std::string token_file = absl::StrCat(scratch_dir_, "/token_a");
  WriteFile(token_file, absl::StrCat("  ", kTokenA, "\n\n"));
  const std::string line_a = absl::StrCat("job ", Job("a"), ": ");

  ProcessResult none = RunToCompletion({*ctl, target, ca, "status"}, "ctl_no_token");
  EXPECT_EQ(none.exit_code, 1) << none.Describe();
  EXPECT_THAT(none.stderr_text, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(none.stderr_text, HasSubstr("--token_file"));
  EXPECT_THAT(none.stderr_text, HasSubstr(server()->address()));
  ProcessResult unknown =
      RunToCompletion({*ctl, target, ca, "--token=not-a-token", "status"}, "ctl_unknown");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.Describe();
  EXPECT_THAT(unknown.stderr_text, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(unknown.stderr_text, HasSubstr("not one reducerd knows"));

  ProcessResult as_a =
      RunToCompletion({*ctl, target, ca, "--token_file=" + token_file, "status"}, "ctl_a");
  ASSERT_TRUE(as_a.Succeeded()) << as_a.Describe();
  EXPECT_THAT(as_a.stdout_text, HasSubstr(line_a));
  EXPECT_THAT(as_a.stdout_text, Not(HasSubstr(Job("b"))));
  ProcessResult as_b = RunToCompletion(
      {*ctl, target, ca, absl::StrCat("--token=", kTokenB), "status"}, "ctl_b");
  ASSERT_TRUE(as_b.Succeeded()) << as_b.Describe();
  EXPECT_THAT(as_b.stdout_text, HasSubstr(absl::StrCat("job ", Job("b"), ": ")));
  EXPECT_THAT(as_b.stdout_text, Not(HasSubstr(Job("a"))));

  ProcessResult plaintext = RunToCompletion(
      {*ctl, target, absl::StrCat("--token=", kTokenA), "--timeout=2s", "status"},
      "ctl_plaintext");
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.Describe();
  EXPECT_THAT(plaintext.stderr_text, HasSubstr(server()->address()));
  EXPECT_THAT(plaintext.stderr_text, HasSubstr("serves TLS"));
  EXPECT_THAT(plaintext.stderr_text, HasSubstr("--tls_ca_file"));

  ProcessResult tls_health = RunToCompletion({*ctl, target, ca, "health"}, "ctl_health_tls");
  EXPECT_TRUE(tls_health.Succeeded()) << tls_health.Describe();
  EXPECT_EQ(tls_health.stdout_text, "SERVING\n");
  ProcessResult plain_health =
      RunToCompletion({*ctl, "--target=" + health, "health"}, "ctl_health_port");
  EXPECT_TRUE(plain_health.Succeeded()) << plain_health.Describe();
  EXPECT_EQ(plain_health.stdout_text, "SERVING\n");
  ProcessResult services = RunToCompletion({*ctl, target, ca, "services"}, "ctl_services");
  EXPECT_TRUE(services.Succeeded()) << services.Describe();
  EXPECT_THAT(services.stdout_text, HasSubstr("reducer.v1.Admin\n"));
  // The plaintext health port serves health alone: no reflection there.
  ProcessResult health_services = RunToCompletion(
      {*ctl, "--target=" + health, "services"}, "ctl_health_port_services");
  EXPECT_EQ(health_services.exit_code, 1) << health_services.Describe();
  EXPECT_THAT(health_services.stderr_text, HasSubstr("UNIMPLEMENTED"));

  Touch("seen");
  for (const ProcessResult& w : WaitWorkers(job_a)) ExpectStep(w, "3", absl::StatusCode::kOk);
  for (const ProcessResult& w : WaitWorkers(job_b)) ExpectStep(w, "3", absl::StatusCode::kOk);
  const std::string logs = server()->Logs();
  for (const char* token : {kTokenA, kTokenB, "not-a-token"}) {
    EXPECT_THAT(logs, Not(HasSubstr(token)));
  }
}

}  // namespace
}  // namespace testing
}  // namespace reducer

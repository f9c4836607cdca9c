// The options of the Reducer client: how a Client connects (ClientOptions,
// TlsOptions) and how one collective runs (CallOptions). Part of the public
// API; client/reducer_client.h includes it.
//
//   reducer::ClientOptions options;
//   options.target = "127.0.0.1:50051";
//   options.job = "train-42";
//   options.rank = 1;
//   options.world_size = 4;
//   reducer::CallOptions call;
//   call.name = "step7";   // match by name rather than call order
//
// Plain structs: thread-compatible.
#ifndef REDUCER_CLIENT_CLIENT_OPTIONS_H_
#define REDUCER_CLIENT_CLIENT_OPTIONS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace reducer {

// TLS to reducerd (docs/security.md). Files are PEM, re-read
// when they change (a rotated Kubernetes Secret), by new connections.
struct TlsOptions {               // paths to PEM files
  std::string ca_file;            // roots that sign reducerd's certificate
  std::string cert_file;          // this worker's certificate (mutual TLS); empty: none
  std::string key_file;
  std::string server_name;        // name to check in reducerd's certificate; empty: the target's host
};

// Whether a session uses the same-host shared-memory path (docs/api.md,
// "Same-host shared memory").
enum class SharedMemory {
  kAuto,      // when reducerd offers it and the handshake proves that both
              // sides map the same memory; else gRPC alone
  kOff,       // gRPC alone
  kRequired,  // Connect fails (FAILED_PRECONDITION, saying why) without it
};

struct ClientOptions {
  using SharedMemory = ::reducer::SharedMemory;

  std::string target = "127.0.0.1:50051";
  std::string job;  // shared by all ranks of one job
  int rank = 0;
  int world_size = 1;
  // ranks of this job on this host (torchrun's LOCAL_WORLD_SIZE); lets a
  // relay join upstream once all arrived; 0: unknown
  int local_world_size = 0;
  absl::Duration timeout = absl::Minutes(5);  // Connect and each collective
  // At the first Connect, tell glibc's malloc to keep freed buffers in the
  // process (see core/process_memory.h): gRPC receives every message into
  // fresh buffers, and handing them back to the kernel makes large
  // collectives up to 3x slower. Process-wide; false if the application
  // tunes malloc itself.
  bool keep_freed_memory = true;
  // At every Connect, unless true, turn Abseil's lock-order (deadlock)
  // checks off for the process, as reducerd does: where Abseil was built
  // with them on (Debian's is), every absl::Mutex lock costs a lookup in a
  // process-wide graph under a global lock, about a microsecond of each
  // small collective's client CPU. Process-wide; true if the application
  // wants the checks (its own tests).
  bool keep_lock_order_checks = false;
  std::optional<TlsOptions> tls;  // unset: plaintext
  std::string token;              // the job's bearer token; empty: none sent
  // Pinned (page-locked) host memory this client allocates once, at its
  // first collective on a CUDA device, and reuses to stage device tensors
  // (docs/api.md, "CUDA device buffers"). A payload that does not fit lands in
  // ordinary host memory, a 4 MiB chunk at a time through this buffer; a
  // call made while another holds it stages through ordinary memory alone,
  // which copies more slowly. 0: never pin.
  size_t cuda_staging_bytes = size_t{64} << 20;
  SharedMemory shared_memory = SharedMemory::kAuto;
  // The input segment a session maps on the same-host path: the payloads
  // of its calls in flight must fit in it together (a call that does not
  // fit travels over gRPC). Pages are committed only as they are written.
  size_t shared_memory_bytes = size_t{256} << 20;
};

struct CallOptions {
  std::vector<int> group;  // ranks taking part, empty = all
  std::string name;        // optional: match by name, not call order
  absl::Duration timeout = absl::ZeroDuration();  // zero: ClientOptions::timeout
  // For tensors on a CUDA device: the cudaStream_t (as void*) whose queued
  // work the collective waits for before it reads the input; null: the
  // default stream. The result is complete when the call returns.
  void* cuda_stream = nullptr;
};

}  // namespace reducer

#endif  // REDUCER_CLIENT_CLIENT_OPTIONS_H_

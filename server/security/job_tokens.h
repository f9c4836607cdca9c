// JobTokens: which bearer token each job's calls must carry, loaded from
// reducerd's --job_tokens_file and re-read when that file changes (a
// Kubernetes Secret swapped by symlink included), without a restart, and
// at once on ReadNow (reducerd's reload, SIGHUP).
//
//   absl::StatusOr<std::unique_ptr<JobTokens>> tokens =
//       JobTokens::Load("/etc/reducer/tokens");
//   const std::string* header = ...;  // the call's `authorization` value
//   absl::Status s = (*tokens)->Check("train-42", PresentToken(header));
//
// The file has one line per job, `JOB SHA256_HEX_OF_TOKEN` (what
// `printf %s "$TOKEN" | sha256sum` prints); blank lines and lines starting
// with '#' are skipped. A line for JOB also covers every job named
// `JOB/anything` (the torch backend names a job per process group,
// `REDUCER_JOB/<suffix>`, so one token covers them all). The line governing
// job N is N's own line when there is one, else the line of the longest
// listed name P with N starting with P + "/"; N's calls must carry that
// line's token. Only the hashes are kept; a presented token is hashed and
// compared with every line's hash in constant time. Tokens are never logged
// or put in an error message.
//
// Thread-safe.
#ifndef REDUCER_SERVER_SECURITY_JOB_TOKENS_H_
#define REDUCER_SERVER_SECURITY_JOB_TOKENS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reducer {

// Where each client takes the job's token, for error messages that tell
// the caller how to send one.
inline constexpr absl::string_view kTokenSettings =
    "ClientOptions::token in C++, token= in Python's reducer.Client, "
    "REDUCER_TOKEN or REDUCER_TOKEN_FILE for the torch backend";

// The SHA-256 digest of a token.
using TokenHash = std::array<uint8_t, 32>;

// SHA-256 of `token`.
TokenHash HashToken(absl::string_view token);

// The token of an `authorization` metadata value "Bearer TOKEN" (the scheme
// matched case-insensitively); empty when the value is not of that form.
absl::string_view BearerToken(absl::string_view authorization);

// A token as presented on one call: whether the call carried one, and its
// hash. Cheap to copy.
struct PresentedToken {
  bool present = false;
  TokenHash hash{};
};

// PresentedToken of a call's `authorization` metadata value (null: none).
PresentedToken PresentToken(const std::string* authorization);

class JobTokens {
 public:
  // Reads `path`. INVALID_ARGUMENT naming the file and line for a malformed
  // line or a job listed twice; NOT_FOUND when it cannot be read.
  // `refresh_interval`: how often, at most, the file is looked at again.
  static absl::StatusOr<std::unique_ptr<JobTokens>> Load(
      std::string path, absl::Duration refresh_interval = absl::Seconds(1));

  // OK when `token` is the token of the line governing `job` (see the top
  // of this file). UNAUTHENTICATED when the call carried no token or one no
  // line has; PERMISSION_DENIED when it is another line's or no line
  // governs the job. The message names the job and the governing line's
  // job, and says how each client sends a token (kTokenSettings), never the
  // token. Re-reads the file first when it changed (a malformed new version
  // is logged and the old tokens stay).
  absl::Status Check(absl::string_view job, const PresentedToken& token);

  // OK when `token` is the token of some job in the file (which one is not
  // said); UNAUTHENTICATED when the call carried no token or one no job
  // has. Never names the token. Re-reads the file first as Check does.
  absl::Status CheckAnyJob(const PresentedToken& token);

  // The tenant `job` belongs to: the job name of the line governing it (see
  // the top of this file), or `job` itself when no line does. Every bound
  // that protects one user of a shared reducerd from another is kept per
  // tenant. Re-reads the file first as Check does.
  std::string TenantOf(absl::string_view job);

  // The tenant whose token `token` is: the job name of a line with that
  // hash (the smallest name when several lines share one), or empty when
  // the call carried no token or one no line has. For calls that name no
  // job yet (a stream before its first message).
  std::string TenantOfToken(const PresentedToken& token);

  // A reload (reducerd's SIGHUP): reads the file now, whatever the refresh
  // interval and whether it looks changed. When it can be used, its lines
  // replace the tokens held and the number of jobs it lists is returned;
  // else the tokens read before stay in force and Load's error is returned
  // (INVALID_ARGUMENT for a malformed line, NOT_FOUND for a file that
  // cannot be read). Logs nothing: the caller says what was reloaded.
  absl::StatusOr<size_t> ReadNow() ABSL_LOCKS_EXCLUDED(mu_);

  // The file's path, as given to Load.
  const std::string& path() const { return path_; }

 private:
  // A file's identity: a swap or rewrite changes at least one of these.
  struct FileStamp {
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp& o) const {
      return device == o.device && inode == o.inode && size == o.size &&
             mtime_ns == o.mtime_ns;
    }
  };
  using HashMap = absl::flat_hash_map<std::string, TokenHash>;

  JobTokens(std::string path, absl::Duration refresh_interval);
  // Parses the file now into `tokens` and `stamp`; Load's errors.
  absl::Status Read(HashMap* tokens, FileStamp* stamp) const;
  void RefreshIfChanged() ABSL_LOCKS_EXCLUDED(mu_);
  // The entry of the line governing `job`; null when none does.
  const HashMap::value_type* Governing(absl::string_view job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string path_;
  const absl::Duration refresh_interval_;

  absl::Mutex mu_;
  HashMap tokens_ ABSL_GUARDED_BY(mu_);  // job -> hash of its token
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
  absl::Time next_look_ ABSL_GUARDED_BY(mu_);
};

// The tenant of `job`: tokens->TenantOf(job), or the job's own name when
// reducerd has no tokens file (`tokens` null): then each job name is its
// own tenant.
inline std::string TenantOf(JobTokens* tokens, absl::string_view job) {
  return tokens == nullptr ? std::string(job) : tokens->TenantOf(job);
}

}  // namespace reducer

#endif  // REDUCER_SERVER_SECURITY_JOB_TOKENS_H_

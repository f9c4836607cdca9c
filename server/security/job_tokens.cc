#include "server/security/job_tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/engine/clock.h"
#include "server/log.h"

namespace reducer {
namespace {

bool ParseHexDigest(absl::string_view hex, TokenHash* out) {
  if (hex.size() != 2 * out->size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    c = absl::ascii_tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out->size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

bool SameHash(const TokenHash& a, const TokenHash& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

TokenHash HashToken(absl::string_view token) {
  TokenHash hash;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(),
         hash.data());
  return hash;
}

absl::string_view BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::StartsWithIgnoreCase(authorization, kScheme)) {
    return {};
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

PresentedToken PresentToken(const std::string* authorization) {
  PresentedToken presented;
  if (authorization == nullptr) return presented;
  absl::string_view token = BearerToken(*authorization);
  if (token.empty()) return presented;
  presented.present = true;
  presented.hash = HashToken(token);
  return presented;
}

JobTokens::JobTokens(std::string path, absl::Duration refresh_interval)
    : path_(std::move(path)), refresh_interval_(refresh_interval) {}

absl::StatusOr<std::unique_ptr<JobTokens>> JobTokens::Load(
    std::string path, absl::Duration refresh_interval) {
  std::unique_ptr<JobTokens> tokens(
      new JobTokens(std::move(path), refresh_interval));
  HashMap map;
  FileStamp stamp;
  absl::Status read = tokens->Read(&map, &stamp);
  if (!read.ok()) return read;
  absl::MutexLock lock(&tokens->mu_);
  tokens->tokens_ = std::move(map);
  tokens->stamp_ = stamp;
  tokens->next_look_ = Clock::Steady().Now() + refresh_interval;
  return tokens;
}

absl::Status JobTokens::Read(HashMap* tokens, FileStamp* stamp) const {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("--job_tokens_file ", path_, " cannot be read"));
  }
  std::ifstream in(path_);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--job_tokens_file ", path_, " cannot be opened"));
  }
  std::stringstream text;
  text << in.rdbuf();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    TokenHash hash;
    if (fields.size() != 2 || !ParseHexDigest(fields[1], &hash)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job_tokens_file ", path_, " line ", line_number,
          ": expected `JOB SHA256_HEX` (64 hex digits, as printed by "
          "`printf %s \"$TOKEN\" | sha256sum`)"));
    }
    if (!tokens->emplace(std::string(fields[0]), hash).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_tokens_file ", path_, " line ", line_number,
                       ": job ", fields[0], " is listed twice"));
    }
  }
  stamp->device = st.st_dev;
  stamp->inode = st.st_ino;
  stamp->size = st.st_size;
  stamp->mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return absl::OkStatus();
}

void JobTokens::RefreshIfChanged() {
  const absl::Time now = Clock::Steady().Now();
  {
    absl::MutexLock lock(&mu_);
    if (now < next_look_) return;
    next_look_ = now + refresh_interval_;
  }
  // stat follows the symlink, so a Secret swapped under it changes the stamp.
  struct stat st;
  FileStamp current;
  if (stat(path_.c_str(), &st) == 0) {
    current.device = st.st_dev;
    current.inode = st.st_ino;
    current.size = st.st_size;
    current.mtime_ns =
        int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  }
  {
    absl::MutexLock lock(&mu_);
    if (current == stamp_) return;
  }
  HashMap map;
  FileStamp stamp;
  absl::Status read = Read(&map, &stamp);
  absl::MutexLock lock(&mu_);
  if (!read.ok()) {
    // Keep serving with the tokens we have; a file half-written now is
    // looked at again at the next interval.
    Log(LogSeverity::kWarning,
        absl::StrCat(read.message(), "; keeping the tokens read before"));
    return;
  }
  tokens_ = std::move(map);
  stamp_ = stamp;
  Log(LogSeverity::kInfo, absl::StrCat("re-read --job_tokens_file ", path_,
                                       ": ", tokens_.size(), " jobs"));
}

absl::StatusOr<size_t> JobTokens::ReadNow() {
  HashMap map;
  FileStamp stamp;
  absl::Status read = Read(&map, &stamp);
  if (!read.ok()) return read;
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(map);
  stamp_ = stamp;
  next_look_ = Clock::Steady().Now() + refresh_interval_;
  return tokens_.size();
}

const JobTokens::HashMap::value_type* JobTokens::Governing(
    absl::string_view job) const {
  auto it = tokens_.find(job);
  // Shorter prefixes, longest first: every '/' from the right.
  for (size_t slash = job.size(); it == tokens_.end() && slash > 0;) {
    slash = job.rfind('/', slash - 1);
    if (slash == absl::string_view::npos) break;
    it = tokens_.find(job.substr(0, slash));
  }
  return it == tokens_.end() ? nullptr : &*it;
}

absl::Status JobTokens::Check(absl::string_view job,
                              const PresentedToken& token) {
  RefreshIfChanged();
  absl::MutexLock lock(&mu_);
  const HashMap::value_type* governing = Governing(job);
  // "job J/x (tokens-file line J)" when a prefix line governs J/x.
  const std::string named =
      governing == nullptr || governing->first == job
          ? absl::StrCat("job ", job)
          : absl::StrCat("job ", job, " (tokens-file line ", governing->first,
                         ")");
  if (!token.present) {
    return absl::UnauthenticatedError(absl::StrCat(
        named, ": the call carries no `authorization: Bearer TOKEN` "
        "metadata, and reducerd requires the job's token (set ",
        kTokenSettings, ")"));
  }
  // Compare with every line's hash, each in constant time, so that the time
  // taken does not depend on which line (if any) the token belongs to.
  bool is_job = false;
  bool is_other = false;
  for (const auto& entry : tokens_) {
    const bool same = SameHash(entry.second, token.hash);
    if (&entry == governing) {
      is_job = same;
    } else {
      is_other |= same;
    }
  }
  if (is_job) return absl::OkStatus();
  if (governing == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job ", job, " has no token in reducerd's --job_tokens_file (no line "
        "for it or for a prefix of it ending before a '/'), so no call may "
        "use it"));
  }
  if (is_other) {
    return absl::PermissionDeniedError(absl::StrCat(
        named, ": the token presented belongs to another job"));
  }
  return absl::UnauthenticatedError(absl::StrCat(
      named, ": the token presented is not one reducerd knows "
      "(wrong or revoked token; check ", kTokenSettings, ")"));
}

absl::Status JobTokens::CheckAnyJob(const PresentedToken& token) {
  RefreshIfChanged();
  if (!token.present) {
    return absl::UnauthenticatedError(
        "the call carries no `authorization: Bearer TOKEN` metadata, and "
        "reducerd requires a job's token");
  }
  absl::MutexLock lock(&mu_);
  // Every hash is compared, as in Check, so the time does not depend on
  // which job (if any) the token belongs to.
  bool known = false;
  for (const auto& [name, hash] : tokens_) known |= SameHash(hash, token.hash);
  if (known) return absl::OkStatus();
  return absl::UnauthenticatedError(absl::StrCat(
      "the token presented is not one reducerd knows (wrong or revoked "
      "token; check ", kTokenSettings, ")"));
}

std::string JobTokens::TenantOf(absl::string_view job) {
  RefreshIfChanged();
  absl::MutexLock lock(&mu_);
  const HashMap::value_type* governing = Governing(job);
  return governing == nullptr ? std::string(job) : governing->first;
}

std::string JobTokens::TenantOfToken(const PresentedToken& token) {
  if (!token.present) return "";
  RefreshIfChanged();
  absl::MutexLock lock(&mu_);
  // Every hash is compared, as in Check.
  const std::string* tenant = nullptr;
  for (const auto& entry : tokens_) {
    if (SameHash(entry.second, token.hash) &&
        (tenant == nullptr || entry.first < *tenant)) {
      tenant = &entry.first;
    }
  }
  return tenant == nullptr ? "" : *tenant;
}

}  // namespace reducer

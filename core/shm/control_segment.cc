#include "core/shm/control_segment.h"

#include <sys/random.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

constexpr char kMagic[8] = {'R', 'D', 'C', 'R', 'C', 'T', 'L', '1'};
// 2: doorbell words carry a sleeper bit under the counter (core/shm/doorbell.h);
// a version-1 peer would ring without clearing it and never wake a sleeper.
constexpr uint32_t kVersion = 2;
constexpr size_t kVersionOffset = 8;
constexpr size_t kNonceOffset = 16;

char* Base(const SharedSegment& segment) {
  return static_cast<char*>(segment.data());
}

// Maps every page of `segment` now. Records walk through each ring, so
// without this each side faults once per page on its first pass, which
// doubled the time of a 4 KiB all-reduce for its job's first few hundred
// calls. Only a hint: refused (an old kernel), pages fault in as touched.
void PopulateRings(SharedSegment& segment) {
  segment.Populate().IgnoreError();
}

}  // namespace

std::string RandomBytes(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return bytes;
}

ControlSegment::ControlSegment(SharedSegment segment)
    : segment_(std::move(segment)),
      requests_(Base(segment_) + kRingsOffset, MessageRing::kDefaultCapacity),
      responses_(Base(segment_) + kRingsOffset +
                     MessageRing::FootprintBytes(MessageRing::kDefaultCapacity),
                 MessageRing::kDefaultCapacity) {}

absl::StatusOr<std::unique_ptr<ControlSegment>> ControlSegment::Create(
    absl::string_view nonce) {
  if (nonce.size() != kNonceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a control segment's nonce has ", kNonceBytes,
                     " bytes, not ", nonce.size()));
  }
  REDUCER_ASSIGN_OR_RETURN(SharedSegment segment,
                           SharedSegment::Create("reducer-control", kBytes));
  char* base = Base(segment);
  std::memcpy(base, kMagic, sizeof(kMagic));
  std::memcpy(base + kVersionOffset, &kVersion, sizeof(kVersion));
  std::memcpy(base + kNonceOffset, nonce.data(), kNonceBytes);
  PopulateRings(segment);
  return std::make_unique<ControlSegment>(std::move(segment));
}

absl::StatusOr<std::unique_ptr<ControlSegment>> ControlSegment::Adopt(int fd) {
  REDUCER_ASSIGN_OR_RETURN(
      SharedSegment segment,
      SharedSegment::Adopt(fd, SharedSegment::Access::kReadWrite));
  if (segment.size() != kBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the control segment has ",
                                                   segment.size(),
                                                   " bytes; this layout "
                                                   "has ",
                                                   kBytes));
  }
  const char* base = Base(segment);
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the control segment's magic is \"",
                     absl::CHexEscape(absl::string_view(base, sizeof(kMagic))),
                     "\", not \"RDCRCTL1\""));
  }
  uint32_t version;
  std::memcpy(&version, base + kVersionOffset, sizeof(version));
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("the control segment has layout version ", version,
                     "; this build reads version ", kVersion,
                     ": the client library and reducerd come from releases "
                     "whose same-host layouts differ. Run matching releases, "
                     "or set ClientOptions::shared_memory to kOff (gRPC "
                     "alone)"));
  }
  PopulateRings(segment);  // only now that its size is this layout's
  return std::make_unique<ControlSegment>(std::move(segment));
}

std::string ControlSegment::nonce() const {
  return std::string(Base(segment_) + kNonceOffset, kNonceBytes);
}

}  // namespace reducer

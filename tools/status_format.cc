#include "tools/status_format.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace reducer {
namespace {

// "256 KiB", "1 MiB", or bytes when not a whole number of KiB.
std::string ChunkSize(uint64_t bytes) {
  if (bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes % (1 << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " bytes");
}

}  // namespace

std::string FormatStatus(const v1::StatusResponse& status) {
  std::string out =
      absl::StrCat("reducerd ", status.version(), ": ",
                   status.serving() ? "serving" : "draining (not serving)",
                   "; memory budget ", status.memory_reserved_bytes(), " of ",
                   status.memory_budget_bytes(), " bytes reserved",
                   status.upstream().empty()
                       ? std::string()
                       : absl::StrCat("; relay of ", status.upstream()),
                   "\n");
  if (status.jobs().empty()) absl::StrAppend(&out, "no jobs\n");
  for (const v1::JobStatus& job : status.jobs()) {
    absl::StrAppend(&out, "job ", job.name(), ": epoch ", job.epoch(), ", ",
                    job.state(), ", ", job.joined_ranks_size(), " of ",
                    job.world_size(), " ranks joined (",
                    job.joined_ranks().empty()
                        ? std::string("none")
                        : absl::StrJoin(job.joined_ranks(), ","),
                    ")");
    if (job.chunk_bytes() > 0) {
      absl::StrAppend(&out, "; chunks ", ChunkSize(job.chunk_bytes()));
      if (job.input_bytes_per_s() > 0) {
        absl::StrAppend(&out, absl::StrFormat(" (inputs at %.1f MB/s)",
                                              job.input_bytes_per_s() / 1e6));
      }
    }
    if (!status.upstream().empty()) {
      absl::StrAppend(&out, "; ", job.relay_bytes_saved(),
                      " bytes saved on the host's link");
    }
    if (job.quorum_mode()) absl::StrAppend(&out, "; quorum steps");
    if (!job.absent_ranks().empty()) {
      absl::StrAppend(&out, "; absent ", absl::StrJoin(job.absent_ranks(), ","));
    }
    if (!job.done_ranks().empty()) {
      absl::StrAppend(&out, "; done ", absl::StrJoin(job.done_ranks(), ","));
    }
    if (!job.end_reason().empty()) {
      absl::StrAppend(&out, "; ", job.end_reason());
    }
    absl::StrAppend(&out, "\n");
    for (const v1::PendingCollective& c : job.pending()) {
      absl::StrAppend(&out, "  ", c.name(), " (ranks ",
                      absl::StrJoin(c.group(), ","), "): ");
      const std::string age = absl::StrFormat("%.1fs", c.age_seconds());
      if (c.missing_ranks().empty()) {
        absl::StrAppend(&out, "every rank arrived ", age,
                        " ago; payload or results still moving");
      } else {
        absl::StrAppend(&out, "waiting ", age, " for ",
                        c.missing_ranks_size() == 1 ? "rank " : "ranks ",
                        absl::StrJoin(c.missing_ranks(), ","));
      }
      if (c.stalled()) absl::StrAppend(&out, "; stalled");
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

}  // namespace reducer

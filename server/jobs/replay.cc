#include "server/jobs/replay.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/reducer/v1/wire_conversion.h"

namespace reducer {

absl::Status CheckReplay(const v1::CollectiveHeader& header) {
  const std::string& attempt = header.attempt_id();
  if (!attempt.empty() &&
      absl::StartsWith(attempt, absl::StrCat(header.session_id(), "/"))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "job ", header.job(), ": rank ", header.rank(), "'s attempt ", attempt,
      " cannot be replayed: a replay names an attempt of its own session "
      "(attempt id <session id>/<n>; this session is ",
      header.session_id(), ")"));
}

absl::StatusOr<std::shared_ptr<Collective>> ReplayKept(
    KeptResults* kept, const v1::CollectiveHeader& header, RankChannel& stream,
    const Logger& log) {
  if (absl::Status valid = CheckReplay(header); !valid.ok()) return valid;
  const int rank = header.rank();
  const std::string what = absl::StrCat("job ", header.job(), ": rank ", rank,
                                        "'s attempt ", header.attempt_id());
  std::optional<KeptResults::Kept> found =
      kept != nullptr ? kept->Find(header.attempt_id(), rank) : std::nullopt;
  if (!found.has_value() || found->messages.empty()) {
    return absl::NotFoundError(absl::StrCat(
        what,
        " has no result kept to send again: its contribution is in no "
        "collective whose result was decided, or the result was too large to "
        "keep (--kept_results_bytes) or is gone"));
  }
  // Only the tensors matter here (the group is not compared).
  absl::StatusOr<Fingerprint> fp = FingerprintFromHeader(header, rank + 1);
  if (!fp.ok()) return fp.status();
  if (fp->tensors != found->declared) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is replayed declaring other tensors than it did (",
                     DescribeTensors(fp->tensors), "; it declared ",
                     DescribeTensors(found->declared), ")"));
  }
  std::vector<ResultMessage>* messages = &found->messages;
  const int ranks[] = {rank};
  log.Log({LogSeverity::kInfo, "result_replayed",
           absl::StrCat(what,
                        " asked again for its result; sent again from "
                        "what was kept"),
           header.job(), header.epoch(), "", ranks});
  for (size_t i = 0; i < messages->size(); ++i) {
    stream.Send(std::move((*messages)[i]), i + 1 == messages->size());
  }
  return std::shared_ptr<Collective>();
}

}  // namespace reducer

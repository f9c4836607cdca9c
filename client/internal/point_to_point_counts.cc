#include "client/internal/point_to_point_counts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/point_to_point_name.h"

namespace reducer {
namespace {

std::string MessageKey(int source, int destination, int64_t tag) {
  return absl::StrCat(source, ">", destination, "|", tag);
}

}  // namespace

PointToPointCounts::Count& PointToPointCounts::CountOf(const std::string& key,
                                                       uint64_t epoch) {
  Count& count = counts_[key];
  if (count.epoch != epoch) count = {epoch, 0};
  return count;
}

PointToPointCounts::Matches& PointToPointCounts::MatchesOf(int destination,
                                                           int64_t tag,
                                                           uint64_t epoch) {
  Matches& m = matches_[absl::StrCat(destination, "|", tag)];
  if (m.epoch != epoch) m = {epoch, 0, 0};
  return m;
}

std::string PointToPointCounts::NextMessage(uint64_t epoch, int source,
                                            int destination, int64_t tag) {
  Count& count = CountOf(MessageKey(source, destination, tag), epoch);
  return PointToPointName(source, destination, tag, count.next++);
}

bool PointToPointCounts::MustMatch(uint64_t epoch, int destination,
                                   int64_t tag) const {
  auto it = matches_.find(absl::StrCat(destination, "|", tag));
  return it != matches_.end() && it->second.epoch == epoch &&
         it->second.unanswered > 0;
}

PointToPointCounts::NewMatch PointToPointCounts::StartMatch(
    uint64_t epoch, int destination, int64_t tag,
    const std::vector<int>& sources) {
  Matches& m = MatchesOf(destination, tag, epoch);
  NewMatch out;
  out.name = MatchName(destination, tag, m.next++);
  ++m.unanswered;
  for (int source : sources) {
    auto it = counts_.find(MessageKey(source, destination, tag));
    if (it != counts_.end() && it->second.epoch == epoch &&
        it->second.next > 0) {
      out.received.emplace_back(source, it->second.next);
    }
  }
  return out;
}

void PointToPointCounts::Answered(uint64_t epoch, int destination, int64_t tag,
                                  int source, uint64_t n) {
  Count& count = CountOf(MessageKey(source, destination, tag), epoch);
  count.next = std::max(count.next, n + 1);
  Abandoned(epoch, destination, tag);
}

void PointToPointCounts::Abandoned(uint64_t epoch, int destination,
                                   int64_t tag) {
  Matches& m = MatchesOf(destination, tag, epoch);
  if (m.unanswered > 0) --m.unanswered;
}

}  // namespace reducer

#include "server/jobs/point_to_point_matches.h"

#include <optional>
#include <utility>

#include "core/point_to_point_name.h"

namespace reducer {

void PointToPointMatches::NoteMessage(const v1::CollectiveHeader& header,
                                      int source, const Collective& message) {
  // The name was checked against the header (CheckPointToPointName).
  const std::optional<PointToPointNameParts> name =
      ParsePointToPointName(header.name());
  if (!name.has_value()) return;
  if (header.rank() != source) {
    matcher_.Received(name->source, name->destination, name->tag, name->n);
    return;
  }
  // A message its receive attached to first is taken already.
  if (message.HasAttached(name->destination)) return;
  matcher_.Sent(name->source, name->destination, name->tag, name->n,
                [this](uint64_t token, int from, uint64_t n) {
                  return Answer(token, from, n);
                });
}

void PointToPointMatches::AddMatch(const v1::CollectiveHeader& header,
                                   int source, std::vector<int> sources,
                                   const std::shared_ptr<Collective>& match) {
  const std::optional<PointToPointNameParts> name =
      ParsePointToPointName(header.name());
  if (!name.has_value()) return;
  MessageMatcher::Match m;
  m.destination = header.rank();
  m.tag = header.match_tag();
  m.number = name->n;
  m.source = source;
  m.sources = std::move(sources);
  for (const v1::ReceivedCount& count : header.match_received()) {
    m.received.emplace_back(count.source(), count.count());
  }
  m.token = ++last_token_;
  waiting_[m.token] = match;
  const uint64_t token = m.token;
  if (!matcher_.Add(std::move(m), [this](uint64_t token, int from, uint64_t n) {
        return Answer(token, from, n);
      })) {
    waiting_.erase(token);  // a retry: its first attach is the match
  }
}

void PointToPointMatches::Clear() {
  matcher_.Clear();
  waiting_.clear();
}

bool PointToPointMatches::Answer(uint64_t token, int source, uint64_t n) {
  auto it = waiting_.find(token);
  if (it == waiting_.end()) return false;
  std::shared_ptr<Collective> match = it->second.lock();
  waiting_.erase(it);
  return match != nullptr &&
         match->SetResultValues(
             {static_cast<int64_t>(source), static_cast<int64_t>(n)});
}

}  // namespace reducer

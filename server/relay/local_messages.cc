#include "server/relay/local_messages.h"

#include <algorithm>

namespace reducer {

bool LocalMessages::KeepsHere(const PointToPointNameParts& message,
                              const v1::CollectiveHeader& header,
                              uint64_t bytes, bool may_stay, absl::Time now) {
  const Key key{message.destination, message.tag, message.source, message.n};
  const bool from_source = header.rank() == message.source;
  auto it = messages_.find(key);
  if (it == messages_.end()) {
    if (!may_stay) return false;
    Entry entry;
    // Rules 2 and 3: a receive coming first stays; a send stays unless a
    // match of its (destination, tag) is on its way upstream.
    entry.here = !from_source ||
                 matching_.count({message.destination, message.tag}) == 0;
    it = messages_.emplace(key, std::move(entry)).first;
  }
  Entry& entry = it->second;
  if (from_source && !entry.sent) {
    entry.sent = true;
    entry.bytes = bytes;
    if (entry.here && !entry.received) {
      entry.arrival = arrivals_++;
      entry.held_since = now;
      entry.send = header;
    }
  }
  if (!from_source) entry.received = true;
  const bool here = entry.here;
  if (entry.sent && entry.received) {
    if (here) {
      ++kept_;
      bytes_saved_ += 2 * entry.bytes;
    }
    messages_.erase(it);
  }
  return here;
}

std::vector<v1::CollectiveHeader> LocalMessages::HeldFrom(
    const std::vector<int>& sources, absl::Time now) {
  std::vector<std::pair<uint64_t, Entry*>> held;
  for (auto& [key, entry] : messages_) {
    if (!entry.here || !entry.sent || entry.received ||
        std::find(sources.begin(), sources.end(), std::get<2>(key)) ==
            sources.end()) {
      continue;
    }
    held.emplace_back(entry.arrival, &entry);
  }
  return Upstream(held, now);
}

std::vector<v1::CollectiveHeader> LocalMessages::Upstream(
    std::vector<std::pair<uint64_t, Entry*>>& held, absl::Time now) {
  std::sort(held.begin(), held.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<v1::CollectiveHeader> sends;
  sends.reserve(held.size());
  for (auto& [arrival, entry] : held) {
    // Its receive follows it upstream.
    entry->here = false;
    v1::CollectiveHeader& send = entry->send;
    if (send.timeout_ms() > 0) {
      const int64_t held_ms =
          absl::ToInt64Milliseconds(now - entry->held_since);
      send.set_timeout_ms(std::max<int64_t>(
          1, send.timeout_ms() - std::max<int64_t>(0, held_ms)));
    }
    sends.push_back(std::move(send));
    entry->send.Clear();
  }
  return sends;
}

std::vector<v1::CollectiveHeader> LocalMessages::BeforeMatch(
    int destination, int64_t tag,
    const std::vector<std::pair<int, uint64_t>>& received, absl::Time now) {
  ++matching_[{destination, tag}];
  auto numbered = [&received](int source) -> uint64_t {
    for (const auto& [from, count] : received) {
      if (from == source) return count;
    }
    return 0;
  };
  std::vector<std::pair<uint64_t, Entry*>> held;
  for (auto it = messages_.lower_bound({destination, tag, -1, 0});
       it != messages_.end() && std::get<0>(it->first) == destination &&
       std::get<1>(it->first) == tag;
       ++it) {
    Entry& entry = it->second;
    const int source = std::get<2>(it->first);
    const uint64_t n = std::get<3>(it->first);
    if (!entry.here || !entry.sent || entry.received || n < numbered(source)) {
      continue;
    }
    held.emplace_back(entry.arrival, &entry);
  }
  return Upstream(held, now);
}

void LocalMessages::MatchDone(int destination, int64_t tag) {
  auto it = matching_.find({destination, tag});
  if (it != matching_.end() && --it->second <= 0) matching_.erase(it);
}

void LocalMessages::Clear() {
  messages_.clear();
  matching_.clear();
}

}  // namespace reducer

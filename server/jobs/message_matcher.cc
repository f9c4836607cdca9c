#include "server/jobs/message_matcher.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace reducer {

void MessageMatcher::Take(Inbox& inbox, int source, uint64_t count) {
  uint64_t& taken = inbox.taken[source];
  if (count <= taken) return;
  taken = count;
  auto begin = inbox.held.lower_bound({source, 0});
  auto end = inbox.held.lower_bound({source, count});
  inbox.held.erase(begin, end);
}

void MessageMatcher::Sent(int source, int destination, int64_t tag, uint64_t n,
                          AnswerFn answer) {
  const Key key{destination, tag};
  Inbox& inbox = inboxes_[key];
  auto taken = inbox.taken.find(source);
  if (taken != inbox.taken.end() && n < taken->second) {
    MaybeForget(key);  // a receive took it already
    return;
  }
  // A retried send keeps its first arrival.
  inbox.held.try_emplace({source, n}, arrivals_++);
  Resolve(inbox, answer);
  MaybeForget(key);
}

void MessageMatcher::Received(int source, int destination, int64_t tag,
                              uint64_t n) {
  const Key key{destination, tag};
  auto it = inboxes_.find(key);
  if (it == inboxes_.end()) return;
  Take(it->second, source, n + 1);
  MaybeForget(key);
}

bool MessageMatcher::Add(Match match, AnswerFn answer) {
  Inbox& inbox = inboxes_[{match.destination, match.tag}];
  inbox.matched = true;
  if (match.number < inbox.next_match || inbox.matches.count(match.number)) {
    return false;
  }
  const uint64_t number = match.number;
  inbox.matches.emplace(number, std::move(match));
  Resolve(inbox, answer);
  return true;
}

void MessageMatcher::Resolve(Inbox& inbox, AnswerFn answer) {
  for (auto it = inbox.matches.find(inbox.next_match);
       it != inbox.matches.end();
       it = inbox.matches.find(inbox.next_match)) {
    const Match& match = it->second;
    for (const auto& [source, count] : match.received) {
      Take(inbox, source, count);
    }
    std::optional<std::pair<int, uint64_t>> pick;
    if (match.source >= 0) {
      pick.emplace(match.source, inbox.taken[match.source]);
    } else {
      // The held message that is the next of its source and arrived first.
      uint64_t first = 0;
      for (const auto& [message, arrival] : inbox.held) {
        const auto& [source, n] = message;
        auto taken = inbox.taken.find(source);
        const uint64_t next = taken == inbox.taken.end() ? 0 : taken->second;
        if (n != next || (pick.has_value() && arrival >= first) ||
            !std::binary_search(match.sources.begin(), match.sources.end(),
                                source)) {
          continue;
        }
        pick = message;
        first = arrival;
      }
      if (!pick.has_value()) return;  // it waits; so do the ones after it
    }
    if (answer(match.token, pick->first, pick->second)) {
      Take(inbox, pick->first, pick->second + 1);
    }
    inbox.matches.erase(it);
    ++inbox.next_match;
  }
}

void MessageMatcher::MaybeForget(const Key& key) {
  auto it = inboxes_.find(key);
  if (it != inboxes_.end() && !it->second.matched && it->second.held.empty()) {
    inboxes_.erase(it);
  }
}

}  // namespace reducer

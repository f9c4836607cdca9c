// RelayCollective's input (relay_collective.h): where each member's
// payload bytes go in the one upstream payload (reduced chunk by chunk,
// concatenated, the root's, or an all-to-all's parts by destination), and
// how much of it is ready to send. The rest of RelayCollective is in
// relay_collective.cc.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "server/relay/relay_collective.h"

namespace reducer {

absl::Status RelayCollective::ReduceChunk(const ReducePlan& plan,
                                          const std::vector<StagedPart>& parts,
                                          size_t begin, size_t end,
                                          char* payload) {
  std::vector<const StagedPart*> staged;
  for (const StagedPart& p : parts) staged.push_back(&p);
  return ReduceStagedParts(plan.layout, plan.tensors, staged, begin, end,
                           payload + begin);
}

absl::Status RelayCollective::PlaceLocked(int m, uint64_t offset,
                                          const Payload& data,
                                          std::vector<ChunkToReduce>* offload) {
  Member& member = members_[m];
  if (offset + data.size() > member.input_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(description_, ": rank ", member.rank, " sent ",
                     offset + data.size(), " payload bytes, more than the ",
                     member.input_bytes, " its tensors hold"));
  }
  member.received = offset + data.size();
  if (split_) {
    if (data.size() > 0) data.CopyTo(member.own_input->data() + offset);
    return absl::OkStatus();
  }
  if (combine_ == Combine::kParts) {
    PlacePartsLocked(m, offset, data);
    return absl::OkStatus();
  }
  if (combine_ != Combine::kReduce) {
    if (data.size() > 0) {
      data.CopyTo(input_->data() + base_[m] + offset);
    }
    return absl::OkStatus();
  }
  // Staged per chunk until every member's part of it is in; then reduced
  // in rank order into the upstream payload.
  const size_t chunk = env_.chunk_bytes;
  size_t pos = offset, consumed = 0;
  while (consumed < data.size()) {
    const size_t k = pos / chunk;
    const size_t begin = k * chunk;
    const size_t len = std::min(chunk, member.input_bytes - begin);
    const size_t n = std::min(len - (pos - begin), data.size() - consumed);
    Staging& staging = staging_[k];
    if (staging.parts.empty()) staging.parts.resize(members_.size());
    StagedPart& part = staging.parts[m];
    part.Append(data, consumed, n);
    if (part.size() == len &&
        ++staging.complete == static_cast<int>(members_.size())) {
      if (offload != nullptr && env_.reduction_pool != nullptr &&
          len >= env_.offload_bytes) {
        offload->push_back(
            ChunkToReduce{k, begin, begin + len, std::move(staging.parts)});
      } else {
        REDUCER_RETURN_IF_ERROR(ReduceChunk(*plan_, staging.parts, begin,
                                            begin + len, input_->data()));
        reduced_[k] = true;
      }
      staging_.erase(k);
    }
    pos += n;
    consumed += n;
  }
  return absl::OkStatus();
}

void RelayCollective::PlacePartsLocked(int m, uint64_t offset,
                                       const Payload& data) {
  // Member m's part for destination d is its bytes [d * part, (d + 1) *
  // part); it goes after the other members' parts for d that come before
  // it: at (d * members + m) * part of the upstream payload.
  const size_t part = part_bytes_;
  const size_t members = members_.size();
  size_t consumed = 0;
  while (consumed < data.size()) {
    const size_t pos = offset + consumed;
    const size_t d = pos / part;
    const size_t in_part = pos - d * part;
    const size_t n = std::min(part - in_part, data.size() - consumed);
    data.CopyTo(consumed, n,
                input_->data() + (d * members + m) * part + in_part);
    consumed += n;
  }
}

void RelayCollective::AdvanceReadyLocked() {
  size_t ready = 0;
  switch (combine_) {
    case Combine::kReduce: {
      size_t k = 0;
      while (k < reduced_.size() && reduced_[k]) ++k;
      ready = std::min(input_->size(), k * env_.chunk_bytes);
      break;
    }
    case Combine::kConcat:
      for (size_t i = 0; i < members_.size(); ++i) {
        ready = base_[i] + members_[i].received;
        if (members_[i].received < members_[i].input_bytes) break;
      }
      break;
    case Combine::kParts:
      // Destination by destination, member by member, up to the first
      // part not whole yet.
      for (size_t d = 0; part_bytes_ > 0 && d * part_bytes_ < input_->size();
           ++d) {
        bool whole = true;
        for (const Member& m : members_) {
          const size_t begin = d * part_bytes_;
          const size_t have = m.received <= begin
                                  ? 0
                                  : std::min(part_bytes_, m.received - begin);
          ready += have;
          if (have < part_bytes_) {
            whole = false;
            break;
          }
        }
        if (!whole) break;
      }
      break;
    case Combine::kAlone:
    case Combine::kRoot:
      for (const Member& m : members_) ready += m.received;
      break;
    case Combine::kNone:
      break;
  }
  input_->MarkReady(ready);
}

}  // namespace reducer

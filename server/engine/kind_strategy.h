// KindStrategy: what differs between collective kinds inside the engine,
// chosen once per collective from its kind (MakeKindStrategy):
//
//   kind                       strategy          payload path
//   AllReduce, ReduceScatter,  ReduceStrategy    staged per chunk, reduced when
//   Reduce                                       every rank's part is in;
//                                                Reduce's only to the root
//   AllGather, Broadcast,      ForwardStrategy   forwarded as received, each
//   Gather                                       rank's bytes at its offset;
//                                                Gather's only to the root
//   Scatter, AllToAll,         ExchangeStrategy  forwarded as received, part j
//   AllToAllV                                    of a sender's input only to
//                                                rank j (AllToAllV: parts of
//                                                the rows each sender gives)
//   SendReceive                SendReceiveStrategy
//                                                the source's whole payload
//                                                held (a buffered send) until
//                                                the destination attached,
//                                                forwarded to it only
//   Barrier                    BarrierStrategy   none
//   Done                       DoneStrategy      none; each rank gets one
//                                                int64 (SetResultValues)
//   QuorumBarrier              QuorumBarrierStrategy
//                                                none; each rank that takes
//                                                part gets the step's marks
//   Match                      MatchStrategy     none; its one rank gets the
//                                                message the job picked for
//                                                it (SetResultValues)
//
// Result specs are per rank: a rank for which GetsResult is false (the
// non-roots of Reduce and Gather, a point-to-point message's source) gets an
// empty spec list and 0 result bytes; every other rank gets what PlanResult
// returns, or what ResultOf returns for it when its result is its own (an
// uneven all-to-all's). A rank that FinishesAlone (a point-to-point
// message's source) gets that empty header when it attaches and may finish
// before the others arrive. A kind whose result the job decides (a match:
// Decided is false until SetResultValues) fails at the end of the epoch and
// detaches a cancelled call, as a collective still waiting for a rank does.
//
// Everything else (attach and agreement, offsets and bounds, the memory
// budget, timers, failure, finishing, metrics) is the Collective's, the same
// for every kind. The Collective calls a strategy only with its own lock
// held, except Reduce, which runs without it (on the reduction pool) and
// touches nothing but its arguments and the strategy's immutable plan.
#ifndef REDUCER_SERVER_ENGINE_KIND_STRATEGY_H_
#define REDUCER_SERVER_ENGINE_KIND_STRATEGY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/fingerprint.h"
#include "server/engine/chunk_pool.h"
#include "server/engine/rank_channel.h"
#include "server/engine/rank_reservation.h"
#include "server/engine/shared_bytes.h"
#include "server/engine/staged_part.h"

namespace reducer {

// What the Collective tracks for one rank of its group, whatever the kind.
// Indices are positions in the group (sorted global ranks).
struct RankState {
  std::shared_ptr<RankChannel> channel;
  bool attached = false;
  Fingerprint fp;
  std::string attempt_id;
  // Its own result specs (KindStrategy::ResultOf), known once all attached;
  // null: the collective's.
  std::shared_ptr<const std::vector<TensorSpec>> own_result_specs;
  size_t input_bytes = 0;   // payload this rank sends
  size_t received = 0;      // of input_bytes, so far
  // When its first and latest payload messages arrived, and the first's
  // size (Collective::InputPace).
  absl::Time first_data_at;
  absl::Time last_data_at;
  size_t first_data_bytes = 0;
  size_t output_bytes = 0;  // result bytes it gets; known once all attached
  size_t sent = 0;          // of output_bytes, queued so far
  int pending_writes = 0;   // queued messages not yet written
  bool read_paused = false;
  bool header_sent = false;
  bool finished = false;
  // KindStrategy::FinishesAlone: its call may finish before every rank
  // attached.
  bool finishes_alone = false;
  // Its call was cancelled after every input was in (see
  // Collective::OnRankCancelled): counted as finished, sent nothing more.
  bool cut_off = false;
  // Quorum barriers: a rank joining the job again (it takes part without
  // contributing), and one the step ended without (never attached, or lost
  // before the end; counted as finished, sent nothing, its late call
  // refused).
  bool joining = false;
  bool left_out = false;
  bool done = false;  // left out because its rank called Done()
  // Its part came in the contribution of the rank at this index (a relay's
  // for several ranks, Collective::Attach's `covered`): attached, finished
  // and left out (it sends and gets nothing itself); -1: not covered.
  int covered_by = -1;
  size_t reserved = 0;      // bytes it holds in the memory budget
  // Those bytes, shared with the messages of its answer not yet written:
  // given back once both let go (null when `reserved` is 0).
  std::shared_ptr<RankReservation> held;
  // Its result is being collected for KeptResults (its room reserved
  // there): every message sent to it, until MarkFinished hands them over.
  bool keeping = false;
  std::vector<ResultMessage> kept;
  // A retry of its attempt took over its result (its input was in, see
  // Collective::Attach): the bytes of the payload it sends again, the same
  // ones, still to be passed over rather than counted twice.
  uint64_t resent_to_skip = 0;
};

// Every part of one chunk of a reduction, one per rank in group order.
struct StagedChunk {
  size_t index = 0;  // chunk k holds payload bytes [k * chunk, (k+1) * chunk)
  size_t bytes = 0;  // in each part: chunk_bytes, or less for the last chunk
  std::vector<StagedPart> parts;
};

class KindStrategy {
 public:
  // How a strategy hands result bytes to its collective: queues `data` for
  // ranks[index] at `offset` of its result, and finishes it if complete.
  class Output {
   public:
    virtual void SendTo(int index, uint64_t offset,
                        std::vector<SharedBytes> data) = 0;

   protected:
    ~Output() = default;
  };

  virtual ~KindStrategy() = default;

  // The memory budget ranks[index], sending `input_bytes`, reserves before
  // any of its payload is accepted: the most this kind can make reducerd
  // hold for it at once (`window` chunks staged in, `window` queued out, the
  // latter only for a rank that gets a result).
  virtual size_t Reservation(int index, size_t input_bytes) const = 0;

  // ranks[index] attaches with `fp`, which agrees with the reference
  // (CheckAgreement): OK, or FAILED_PRECONDITION when it disagrees with a
  // rank attached before it in a way only this kind knows (an uneven
  // all-to-all's rows), naming both by their global ranks (`group`), and
  // `*other` set to that rank's index. The Collective adds its description.
  virtual absl::Status CheckAttached(int /*index*/, const Fingerprint& /*fp*/,
                                     const std::vector<RankState>& /*ranks*/,
                                     const std::vector<int>& /*group*/,
                                     int* /*other*/) const {
    return absl::OkStatus();
  }

  // Every rank attached, `reference` agreed by all: sets each rank's
  // output_bytes and returns the result's tensors, the same for every rank
  // that GetsResult (each part of them in its own result) unless ResultOf
  // says otherwise.
  virtual std::vector<TensorSpec> PlanResult(const Fingerprint& reference,
                                             std::vector<RankState>& ranks) = 0;

  // After PlanResult: ranks[index]'s result specs when they are its own
  // rather than PlanResult's (an uneven all-to-all's dimension 0 is what
  // that rank gets); nullopt otherwise.
  virtual std::optional<std::vector<TensorSpec>> ResultOf(int /*index*/) const {
    return std::nullopt;
  }

  // Whether ranks[index] gets a result (the specs PlanResult returned);
  // false: an empty spec list and no result bytes (its output_bytes is 0).
  virtual bool GetsResult(int index) const { return true; }

  // ranks[index] takes no part (its rank called Done(), or a quorum step
  // ended without it): it sends nothing and gets nothing, and the result
  // is made over the others (an all-reduce reduces the others' parts, an
  // all-gather gives it an empty part, a barrier counts it as arrived).
  // Called before it attached, before or after PlanResult; appends the
  // chunks that are now whole to `ready`. False when this kind cannot do
  // without that rank's part (the root of a rooted kind, a
  // reduce-scatter's, scatter's or all-to-all's slices, a message's end):
  // the collective then fails.
  virtual bool Exclude(int /*index*/, std::vector<StagedChunk>* /*ready*/) {
    return false;
  }

  // ranks[index]'s part comes combined into another rank's contribution
  // (Collective::Attach's `covered`): it sends and gets nothing itself, as
  // with Exclude, but it still counts as a rank with values (an average
  // divides by it). Only for kinds that take such contributions
  // (TakesSeveralRanks); false when this one cannot.
  virtual bool Cover(int index, std::vector<StagedChunk>* ready) {
    return Exclude(index, ready);
  }

  // Values the job hands the kind for its result: Done's one int64 (the
  // next sequence number of the job's unnamed collectives, set before each
  // attach), a match's message (its source and count, set once it is
  // picked, whenever that is); ignored by other kinds. `all_attached`: every
  // rank is attached now, so a result may be sent through `out`. Set again,
  // with the same values, on a strategy made anew.
  virtual void SetResultValues(const std::vector<int64_t>& /*values*/,
                               bool /*all_attached*/, Output& /*out*/) {}

  // Whether the result is decided once every rank attached and sent its
  // whole payload (true for every kind but a match, which is decided once
  // the job picked its message: until then the end of the job's epoch fails
  // it, and a cancelled call is detached for its retry).
  virtual bool Decided() const { return true; }

  // What an undecided collective whose every rank arrived still waits for,
  // for its stall warning and its deadline's error ("no rank sent to rank 1
  // with tag 7"); empty: the Collective's own account of missing payload.
  virtual std::string Awaited() const { return std::string(); }

  // Whether ranks[index] needs no other rank to finish: it gets no result
  // (GetsResult is false) and its call ends OK as soon as its whole payload
  // is held, whether or not the others attached (a buffered send). Its
  // Reservation must then cover everything it can make reducerd hold, and
  // HoldsBytesOf keep it until the collective is done or failed.
  virtual bool FinishesAlone(int index) const { return false; }

  // Right after PlanResult: sends what was held back until every rank's
  // offset was known.
  virtual void OnAllAttached(Output& out) {}

  // `rank` (ranks[index]) sent payload bytes [offset, offset + data.size()),
  // in order and within its input (checked by the Collective). Appends the
  // chunks whose every part is now in to `ready`, for the Collective to
  // Reduce.
  virtual void Accept(int index, const RankState& rank, uint64_t offset,
                      Payload data, bool all_attached, Output& out,
                      std::vector<StagedChunk>* ready) = 0;

  // Reduces a ready chunk into a result chunk. Thread-safe; without the lock.
  virtual absl::StatusOr<SharedBytes> Reduce(StagedChunk chunk) const {
    return absl::InternalError("this collective kind reduces nothing");
  }

  // A chunk Accept made ready was reduced (or its reduction failed) and its
  // parts are freed. Called first, whatever happens next.
  virtual void OnChunkReduced() {}
  // Sends the reduced `result` of chunk `chunk_index` to the ranks that get
  // it. Not called when the reduction or the collective failed.
  virtual void Deliver(size_t chunk_index, SharedBytes result, Output& out) {}

  // Whether ranks[index]'s call may read its next message now.
  virtual bool MayRead(int index, const std::vector<RankState>& ranks,
                       bool all_attached) const = 0;

  // Whether ranks[index] still has bytes staged here (its reservation must
  // stay until they are gone, even once it is finished).
  virtual bool HoldsBytesOf(int index) const { return false; }

  // The collective failed: drops every byte held.
  virtual void Clear() {}
};

// What a kind is, known before any rank attached: the questions a job
// asks before it makes a collective, and the Collective before it has a
// strategy, answered here rather than by lists of kinds.
struct KindTraits {
  // Only the root sends payload (Broadcast's and Scatter's root, a
  // point-to-point message's source); with false every rank sends the
  // tensors it declares (none for Barrier, Done, QuorumBarrier and Match).
  bool only_root_sends = false;
  // Its payload is staged and reduced per chunk, so a job paces the chunk
  // size to how fast inputs arrive (Collective::SetChunkBytes,
  // server/engine/chunk_pacing.h): AllReduce, ReduceScatter, Reduce.
  bool paced_chunks = false;
  // One contribution may stand for several ranks, its inputs combined
  // beforehand (CollectiveHeader.ranks, a relay's): AllReduce, Reduce and
  // ReduceScatter (reduced), AllGather and Gather (concatenated), Broadcast
  // and Scatter (the root's), AllToAll (per destination, its ranks' parts
  // for it in group order), Barrier. Its result is its ranks' results
  // concatenated in group order where each rank gets a result of its own
  // (ReduceScatter's slices, Scatter's parts, AllToAll's rows sent to it),
  // else the one result they share. AllToAllV (each rank's rows its own),
  // and kinds whose calls are per rank by nature (point-to-point, Done,
  // quorum steps), do not.
  bool takes_several_ranks = false;
};
KindTraits TraitsOf(CollectiveKind kind);

// What one of the `ranks` ranks a contribution of `fp` stands for would
// have declared alone, which is what must agree with the other ranks'
// contributions: an AllToAll's tensor holds its ranks' rows (dimension 0
// divided by `ranks`, which CoveredRanks checked divides it); every other
// kind's as it is (the same as one rank's, or a gather's rows, whose
// number need not agree).
Fingerprint OneRanksFingerprint(Fingerprint fp, int ranks);

// The positions in the group of the ranks ranks[index]'s contribution
// stands for: ranks[index] and the ranks it covers (RankState::covered_by),
// consecutive in the group, from `first` to `last` inclusive.
struct CoveredSpan {
  int first = 0;
  int last = 0;
  int count() const { return last - first + 1; }
};
CoveredSpan SpanOf(const std::vector<RankState>& ranks, int index);

// The strategy for `reference`'s kind over `group_size` ranks; `root_index`
// the root's position in the group (kinds with a root; else ignored);
// `chunk_bytes` and `window` as in EngineOptions, `chunks` holding
// chunk_bytes each.
std::unique_ptr<KindStrategy> MakeKindStrategy(const Fingerprint& reference,
                                               int group_size, int root_index,
                                               size_t chunk_bytes, int window,
                                               ChunkPool* chunks);

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_KIND_STRATEGY_H_

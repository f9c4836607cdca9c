// One rank of the robustness campaign (tests/campaign/campaign.h): runs the
// job's seeded mix of collectives (tests/campaign/op_mix.h) against the
// shards in --target, checks every result against its closed form, and
// appends one JSON line per operation to --log:
//
//   {"job":"j0","rank":1,"gen":2,"round":3,"step":57,"kind":"allreduce_inplace",
//    "elements":70000,"named":false,"start_us":...,"end_us":...,
//    "timeout_ms":6000,"code":"ABORTED","message":"...","check":"ok",...}
//
// (tests/campaign/history.h, FormatHistoryLine).
//
// "check" is "ok" (the result is the closed form, or a failed in-place call
// left its buffer untouched), "bad: WHAT" (a violation), or "none".
//
// Lifecycle: Connect (retried until it works or the campaign ends), then a
// resynchronising all-reduce (MAX of each rank's next step and round, so
// that a rank restarted from step 0 and the others agree where to go on,
// and every epoch is a round of its own), then steps. "gen" counts this
// process's Connects.
// A failure that ends the session (ABORTED, UNAVAILABLE and the like) makes
// the rank connect again; one that does not (DEADLINE_EXCEEDED) goes on to
// the next step. Every kPollEvery steps the ranks all-reduce whether
// --stop_file exists, and all stop together once it does; the process
// exits 0 then, or at --give_up_unix_s with exit code 3.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reducer_client.h"
#include "tests/campaign/history.h"
#include "tests/campaign/op_mix.h"
#include "tests/campaign/rank_flags.h"
#include "tests/single_tensor.h"

ABSL_FLAG(int, world_size, 1, "ranks in the job");
ABSL_FLAG(uint64_t, seed, 1, "the job's seed (the same on every rank)");
ABSL_FLAG(int64_t, max_elements, 768 << 10, "largest tensor, float32 elements");

namespace reducer {
namespace testing {
namespace {

constexpr int kPollEvery = 4;

// What one operation did.
struct Outcome {
  absl::Status status;
  std::string check = "none";
};

class Rank {
 public:
  Rank()
      : log_fd_(OpenHistoryLog()),
        options_(CampaignClientOptions(absl::GetFlag(FLAGS_world_size))) {}

  int Run() {
    const absl::Time give_up = GiveUpTime();
    while (absl::Now() < give_up) {
      if (client_ == nullptr && !Connect()) {
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      if (!resynced_ && !Resync()) continue;
      if (step_ % kPollEvery == 0 && !polled_) {
        absl::StatusOr<bool> stop = PollStop();
        if (!stop.ok()) continue;
        if (*stop) {
          client_.reset();
          return 0;
        }
      }
      polled_ = false;
      const CampaignOp op = DrawOp(absl::GetFlag(FLAGS_seed), step_,
                                   options_.world_size,
                                   absl::GetFlag(FLAGS_max_elements));
      const absl::Time start = absl::Now();
      Outcome outcome = RunOp(op);
      Record(op.step, KindName(op.kind), op.elements, op.named, start, outcome);
      ++step_;
      if (!outcome.status.ok()) AfterFailure(outcome.status);
    }
    return 3;
  }

 private:
  bool Connect() {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options_);
    Record(-1, "connect", 0, false, start, Outcome{client.status()});
    if (!client.ok()) return false;
    client_ = *std::move(client);
    ++generation_;
    resynced_ = false;
    return true;
  }

  // The first collective of every epoch: every rank goes on from the
  // furthest step any of them reached, in a round numbered past every
  // rank's last, so that (round, step) names one collective in the history.
  bool Resync() {
    const absl::Time start = absl::Now();
    int64_t mine[2] = {step_, round_};
    absl::StatusOr<Tensor> furthest = client_->AllReduce(
        TensorView(mine, DataType::kInt64, {2}), ReduceOp::kMax, Call(false, 0));
    Record(-1, "resync", 2, false, start, Outcome{furthest.status()});
    if (!furthest.ok()) {
      AfterFailure(furthest.status());
      return false;
    }
    const int64_t* agreed = static_cast<const int64_t*>(furthest->data());
    // The next poll comes first, at a step all ranks agree on.
    step_ = (agreed[0] + kPollEvery - 1) / kPollEvery * kPollEvery;
    round_ = agreed[1] + 1;
    poll_step_ = -1;
    resynced_ = true;
    return true;
  }

  absl::StatusOr<bool> PollStop() {
    const absl::Time start = absl::Now();
    const int64_t mine = StopFileExists() ? 1 : 0;
    absl::StatusOr<int64_t> any =
        client_->AllReduce(mine, ReduceOp::kMax, Call(false, 0));
    // Polls of one step are told apart, so that a retried poll is a
    // collective of its own in the history.
    const int nth = poll_step_ == step_ ? ++poll_tries_ : (poll_tries_ = 0);
    poll_step_ = step_;
    Record(step_, nth == 0 ? "poll" : absl::StrCat("poll#", nth + 1), 1, false,
           start, Outcome{any.status()});
    if (!any.ok()) {
      AfterFailure(any.status());
      return any.status();
    }
    polled_ = true;
    return *any != 0;
  }

  void AfterFailure(const absl::Status& status) {
    switch (status.code()) {
      case absl::StatusCode::kDeadlineExceeded:
      case absl::StatusCode::kInvalidArgument:
        return;  // the session goes on
      default:
        client_.reset();  // Connect again (a new epoch)
    }
  }

  CallOptions Call(bool named, int64_t step) const {
    CallOptions call;
    call.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
    if (named) call.name = absl::StrCat("c", step);
    return call;
  }

  static std::string Compare(const Tensor& got, const std::vector<float>& want,
                             const std::vector<int64_t>& shape) {
    if (got.dtype() != DataType::kFloat32) return "bad: dtype";
    if (got.shape() != shape) return "bad: shape";
    if (want.empty() || std::memcmp(got.data(), want.data(), want.size() * 4) == 0) {
      return "ok";
    }
    const float* g = static_cast<const float*>(got.data());
    for (size_t i = 0; i < want.size(); ++i) {
      if (g[i] != want[i]) {
        return absl::StrFormat("bad: element %d is %g, want %g", i, g[i], want[i]);
      }
    }
    return "ok";
  }

  // In place: the result on success, the old contents on failure.
  static std::string CompareInPlace(const absl::Status& status,
                                    const std::vector<float>& buffer,
                                    const std::vector<float>& before,
                                    const std::vector<float>& want) {
    const std::vector<float>& expected = status.ok() ? want : before;
    if (buffer == expected) return "ok";
    return status.ok() ? "bad: in-place result differs"
                       : "bad: failed in-place call changed the buffer";
  }

  Outcome RunOp(const CampaignOp& op) {
    const int r = options_.rank;
    const int w = options_.world_size;
    const int64_t n = op.elements;
    const CallOptions call = Call(op.named, op.step);
    Outcome out;
    switch (op.kind) {
      case CampaignKind::kAllReduce:
      case CampaignKind::kAllReduceAsync: {
        const std::vector<float> in = SumInput(n, op.step, r, w);
        const TensorView view(in.data(), DataType::kFloat32, {n});
        absl::StatusOr<Tensor> got =
            op.kind == CampaignKind::kAllReduce
                ? client_->AllReduce(view, ReduceOp::kSum, call)
                : SingleOf(client_->AllReduceAsync(view, ReduceOp::kSum, call)
                               ->Wait());
        out.status = got.status();
        if (got.ok()) out.check = Compare(*got, SumExpected(n, op.step, w), {n});
        break;
      }
      case CampaignKind::kAllReduceMax: {
        const std::vector<float> in = MaxInput(n, op.step, r);
        absl::StatusOr<Tensor> got = client_->AllReduce(
            TensorView(in.data(), DataType::kFloat32, {n}), ReduceOp::kMax, call);
        out.status = got.status();
        if (got.ok()) out.check = Compare(*got, MaxExpected(n, op.step, w), {n});
        break;
      }
      case CampaignKind::kAllReduceInPlace: {
        const std::vector<float> before = SumInput(n, op.step, r, w);
        std::vector<float> buffer = before;
        out.status = client_->AllReduceInPlace(
            MutableTensorView(buffer.data(), DataType::kFloat32, {n}),
            ReduceOp::kSum, call);
        out.check = CompareInPlace(out.status, buffer, before,
                                   SumExpected(n, op.step, w));
        break;
      }
      case CampaignKind::kAllReduceMany: {
        std::vector<std::vector<float>> ins;
        std::vector<TensorView> views;
        const int64_t each = n / 3;
        for (int t = 0; t < 3; ++t) ins.push_back(SumInput(each + t, op.step * 3 + t, r, w));
        for (const auto& in : ins) {
          views.emplace_back(in.data(), DataType::kFloat32,
                             std::vector<int64_t>{static_cast<int64_t>(in.size())});
        }
        const std::vector<ReduceOp> ops(3, ReduceOp::kSum);
        absl::StatusOr<std::vector<Tensor>> got = client_->AllReduceMany(views, ops, call);
        out.status = got.status();
        if (got.ok()) {
          out.check = got->size() == 3 ? "ok" : "bad: tensor count";
          for (int t = 0; t < 3 && out.check == "ok"; ++t) {
            out.check = Compare((*got)[t], SumExpected(each + t, op.step * 3 + t, w),
                                {each + t});
          }
        }
        break;
      }
      case CampaignKind::kAllGather: {
        const std::vector<float> in = GatherInput(op, r);
        absl::StatusOr<Tensor> got = client_->AllGather(
            TensorView(in.data(), DataType::kFloat32, {GatherRows(op, r), kGatherColumns}),
            call);
        out.status = got.status();
        if (got.ok()) {
          const std::vector<float> want = GatherExpected(op);
          out.check = Compare(*got, want,
                              {static_cast<int64_t>(want.size()) / kGatherColumns,
                               kGatherColumns});
        }
        break;
      }
      case CampaignKind::kBroadcast: {
        const std::vector<float> values = BroadcastValues(op);
        const TensorView view = r == op.root
                                    ? TensorView(values.data(), DataType::kFloat32, {n})
                                    : TensorView();
        absl::StatusOr<Tensor> got = client_->Broadcast(view, op.root, call);
        out.status = got.status();
        if (got.ok()) out.check = Compare(*got, values, {n});
        break;
      }
      case CampaignKind::kBroadcastInPlace: {
        const std::vector<float> values = BroadcastValues(op);
        const std::vector<float> before =
            r == op.root ? values : std::vector<float>(n, -1.0f);
        std::vector<float> buffer = before;
        out.status = client_->BroadcastInPlace(
            MutableTensorView(buffer.data(), DataType::kFloat32, {n}), op.root, call);
        out.check = CompareInPlace(out.status, buffer, before, values);
        break;
      }
      case CampaignKind::kReduceScatter: {
        const int64_t slice = ScatterSlice(op);
        const std::vector<float> in = SumInput(slice * w, op.step, r, w);
        absl::StatusOr<Tensor> got = client_->ReduceScatter(
            TensorView(in.data(), DataType::kFloat32, {slice * w}), ReduceOp::kSum, call);
        out.status = got.status();
        if (got.ok()) {
          const std::vector<float> all = SumExpected(slice * w, op.step, w);
          out.check = Compare(*got, std::vector<float>(all.begin() + r * slice,
                                                       all.begin() + (r + 1) * slice),
                              {slice});
        }
        break;
      }
      case CampaignKind::kBarrier:
        out.status = client_->Barrier(call);
        break;
      case CampaignKind::kMetricSync: {
        // A float64 count (rank r adds r + 1) and a one-hot int64 vector.
        double count = r + 1;
        std::vector<int64_t> seen(w, 0);
        seen[r] = 1;
        const double count_before = count;
        const std::vector<int64_t> seen_before = seen;
        MetricSync sync(client_.get());
        sync.Add("count", MutableTensorView(&count, DataType::kFloat64, {}), ReduceOp::kSum);
        sync.Add("seen", MutableTensorView(seen.data(), DataType::kInt64, {w}),
                 ReduceOp::kSum);
        out.status = sync.ReduceInPlace(call);
        if (out.status.ok()) {
          out.check = count == w * (w + 1) / 2.0 &&
                              seen == std::vector<int64_t>(w, 1)
                          ? "ok"
                          : "bad: metric states";
        } else {
          out.check = count == count_before && seen == seen_before
                          ? "ok"
                          : "bad: failed metric sync changed a state";
        }
        break;
      }
    }
    return out;
  }

  void Record(int64_t step, absl::string_view kind, int64_t elements, bool named,
              absl::Time start, const Outcome& outcome) {
    Operation op;
    op.job = options_.job;
    op.rank = options_.rank;
    op.gen = generation_;
    op.round = round_;
    op.step = step;
    op.kind = std::string(kind);
    op.elements = elements;
    op.named = named;
    op.start = start;
    op.end = absl::Now();
    op.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
    op.code = absl::StatusCodeToString(outcome.status.code());
    op.message = std::string(outcome.status.message());
    op.check = outcome.check;
    AppendHistoryLine(log_fd_, op);
  }

  const int log_fd_;
  ClientOptions options_;
  std::unique_ptr<Client> client_;
  int generation_ = 0;
  int64_t step_ = 0;
  int64_t round_ = 0;  // see Resync
  bool resynced_ = false;
  bool polled_ = false;  // this step's poll is done
  int64_t poll_step_ = -1;  // the step of the last poll, and its tries
  int poll_tries_ = 0;
};

}  // namespace
}  // namespace testing
}  // namespace reducer

int main(int argc, char** argv) {
  return reducer::testing::CampaignRankMain<reducer::testing::Rank>(argc, argv);
}

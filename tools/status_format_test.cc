#include "tools/status_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(FormatStatusTest, NamesJobsRanksAndWhatEachCollectiveWaitsFor) {
  v1::StatusResponse status;
  status.set_version("0.1.0");
  status.set_serving(true);
  status.set_memory_reserved_bytes(2048);
  status.set_memory_budget_bytes(4096);
  v1::JobStatus* job = status.add_jobs();
  job->set_name("train-42");
  job->set_world_size(3);
  job->set_epoch(2);
  job->set_state("running");
  job->add_joined_ranks(0);
  job->add_joined_ranks(1);
  job->add_joined_ranks(2);
  v1::PendingCollective* waiting = job->add_pending();
  waiting->set_name("allreduce \"step7\"");
  waiting->add_group(0);
  waiting->add_group(1);
  waiting->add_group(2);
  waiting->add_missing_ranks(1);
  waiting->add_missing_ranks(2);
  waiting->set_age_seconds(12.54);
  waiting->set_stalled(true);
  v1::PendingCollective* moving = job->add_pending();
  moving->set_name("allgather #3");
  moving->add_group(0);
  moving->add_group(1);
  moving->set_age_seconds(0.25);
  EXPECT_EQ(FormatStatus(status),
            "reducerd 0.1.0: serving; memory budget 2048 of 4096 bytes reserved\n"
            "job train-42: epoch 2, running, 3 of 3 ranks joined (0,1,2)\n"
            "  allreduce \"step7\" (ranks 0,1,2): waiting 12.5s for ranks 1,2; stalled\n"
            "  allgather #3 (ranks 0,1): every rank arrived 0.2s ago; payload or "
            "results still moving\n");
}

TEST(FormatStatusTest, AJobOfQuorumStepsNamesItsAbsentAndDoneRanks) {
  v1::StatusResponse status;
  status.set_version("0.1.0");
  status.set_serving(true);
  v1::JobStatus* job = status.add_jobs();
  job->set_name("ft");
  job->set_world_size(4);
  job->set_epoch(1);
  job->set_state("running");
  for (int r : {0, 1, 2}) job->add_joined_ranks(r);
  job->set_quorum_mode(true);
  job->add_absent_ranks(3);
  job->add_done_ranks(1);
  EXPECT_EQ(FormatStatus(status),
            "reducerd 0.1.0: serving; memory budget 0 of 0 bytes reserved\n"
            "job ft: epoch 1, running, 3 of 4 ranks joined (0,1,2); quorum "
            "steps; absent 3; done 1\n");
}

TEST(FormatStatusTest, AJobShowsItsPacedChunkAndTheInputPaceBehindIt) {
  v1::StatusResponse status;
  status.set_version("0.1.0");
  status.set_serving(true);
  v1::JobStatus* job = status.add_jobs();
  job->set_name("slow");
  job->set_world_size(2);
  job->set_epoch(1);
  job->set_state("running");
  for (int r : {0, 1}) job->add_joined_ranks(r);
  job->set_chunk_bytes(65536);
  job->set_input_bytes_per_s(2.5e6);
  v1::JobStatus* fresh = status.add_jobs();
  fresh->set_name("fresh");
  fresh->set_world_size(1);
  fresh->set_epoch(1);
  fresh->set_state("running");
  fresh->add_joined_ranks(0);
  fresh->set_chunk_bytes(1 << 20);  // not timed yet: no pace
  EXPECT_EQ(FormatStatus(status),
            "reducerd 0.1.0: serving; memory budget 0 of 0 bytes reserved\n"
            "job slow: epoch 1, running, 2 of 2 ranks joined (0,1); chunks "
            "64 KiB (inputs at 2.5 MB/s)\n"
            "job fresh: epoch 1, running, 1 of 1 ranks joined (0); chunks 1 MiB\n");
}

TEST(FormatStatusTest, ARelayNamesItsUpstreamAndWhatEachJobSaved) {
  v1::StatusResponse status;
  status.set_version("0.1.0");
  status.set_serving(true);
  status.set_upstream("shard-0:50051,shard-1:50051");
  v1::JobStatus* job = status.add_jobs();
  job->set_name("train");
  job->set_world_size(8);
  job->set_epoch(1);
  job->set_state("running");
  for (int r : {4, 5, 6, 7}) job->add_joined_ranks(r);
  job->set_relay_bytes_saved(6291456);
  EXPECT_EQ(FormatStatus(status),
            "reducerd 0.1.0: serving; memory budget 0 of 0 bytes reserved; "
            "relay of shard-0:50051,shard-1:50051\n"
            "job train: epoch 1, running, 4 of 8 ranks joined (4,5,6,7); "
            "6291456 bytes saved on the host's link\n");
}

TEST(FormatStatusTest, AnAbortedJobSaysWhy) {
  v1::StatusResponse status;
  status.set_version("0.1.0");
  v1::JobStatus* job = status.add_jobs();
  job->set_name("j");
  job->set_world_size(2);
  job->set_epoch(1);
  job->set_state("aborted");
  job->set_end_reason("rank 1's session was lost");
  job->add_joined_ranks(0);
  EXPECT_EQ(FormatStatus(status),
            "reducerd 0.1.0: draining (not serving); memory budget 0 of 0 bytes "
            "reserved\n"
            "job j: epoch 1, aborted, 1 of 2 ranks joined (0); rank 1's session "
            "was lost\n");
}

}  // namespace
}  // namespace reducer

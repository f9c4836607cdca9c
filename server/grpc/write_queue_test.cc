// WriteQueue: one write in flight, the rest in order; dropping spares the
// message gRPC already holds.
#include "server/grpc/write_queue.h"

#include <string>

#include "gtest/gtest.h"

namespace reducer {
namespace {

TEST(WriteQueueTest, OnlyTheFirstPushStartsAWrite) {
  WriteQueue<std::string> q;
  EXPECT_TRUE(q.idle());
  EXPECT_TRUE(q.Push("a"));
  EXPECT_FALSE(q.Push("b"));
  EXPECT_FALSE(q.Push("c"));
  EXPECT_TRUE(q.write_in_flight());
  EXPECT_EQ(q.front(), "a");
  EXPECT_EQ(q.size(), 3u);
}

TEST(WriteQueueTest, WritesComeOutInOrderOneAtATime) {
  WriteQueue<std::string> q;
  ASSERT_TRUE(q.Push("a"));
  q.Push("b");
  EXPECT_FALSE(q.TakeNext());  // "a" is still in flight
  EXPECT_EQ(q.PopWritten(), "a");
  EXPECT_FALSE(q.write_in_flight());
  ASSERT_TRUE(q.TakeNext());
  EXPECT_EQ(q.front(), "b");
  EXPECT_EQ(q.PopWritten(), "b");
  EXPECT_FALSE(q.TakeNext());
  EXPECT_TRUE(q.idle());
}

TEST(WriteQueueTest, PushAfterTheQueueDrainedStartsAWriteAgain) {
  WriteQueue<std::string> q;
  ASSERT_TRUE(q.Push("a"));
  q.PopWritten();
  EXPECT_TRUE(q.Push("b"));
}

TEST(WriteQueueTest, DropUnwrittenKeepsTheFrontInFlight) {
  WriteQueue<std::string> q;
  ASSERT_TRUE(q.Push("a"));
  q.Push("b");
  q.Push("c");
  q.DropUnwritten();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q.front(), "a");
  EXPECT_EQ(q.PopWritten(), "a");
  EXPECT_TRUE(q.idle());
}

TEST(WriteQueueTest, DropUnwrittenWithNothingInFlightDropsAll) {
  WriteQueue<std::string> q;
  ASSERT_TRUE(q.Push("a"));
  q.Push("b");
  q.PopWritten();  // "b" waits, not yet taken
  q.DropUnwritten();
  EXPECT_TRUE(q.idle());
}

}  // namespace
}  // namespace reducer

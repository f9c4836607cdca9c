// WriteQueue: one write in flight, the rest in order; dropping spares the
// message gRPC already holds; the bytes not yet written are counted until
// each message is written or dropped.
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

TEST(WriteQueueTest, CountsTheBytesOfWhatIsNotWrittenYet) {
  WriteQueue<std::string> q;
  EXPECT_EQ(q.unwritten_bytes(), 0u);
  ASSERT_TRUE(q.Push("a", 100));
  q.Push("b", 20);
  q.Push("c", 3);
  // The message in flight is not written until its write completes.
  EXPECT_EQ(q.unwritten_bytes(), 123u);
  EXPECT_EQ(q.PopWritten(), "a");
  EXPECT_EQ(q.unwritten_bytes(), 23u);
  ASSERT_TRUE(q.TakeNext());
  EXPECT_EQ(q.PopWritten(), "b");
  ASSERT_TRUE(q.TakeNext());
  EXPECT_EQ(q.PopWritten(), "c");
  EXPECT_EQ(q.unwritten_bytes(), 0u);
}

TEST(WriteQueueTest, DroppedMessagesAreNoLongerCounted) {
  WriteQueue<std::string> q;
  ASSERT_TRUE(q.Push("a", 100));
  q.Push("b", 20);
  q.Push("c", 3);
  q.DropUnwritten();
  EXPECT_EQ(q.unwritten_bytes(), 100u);  // "a" is still in flight
  q.PopWritten();
  EXPECT_EQ(q.unwritten_bytes(), 0u);

  q.Push("d", 7);
  q.Push("e", 8);
  q.PopWritten();
  q.Clear();
  EXPECT_EQ(q.unwritten_bytes(), 0u);
}

}  // namespace
}  // namespace reducer

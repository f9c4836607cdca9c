#include "core/shm/message_ring.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace reducer {
namespace {

constexpr uint64_t kWrapMarker = ~uint64_t{0};

constexpr uint64_t Padded(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

}  // namespace

MessageRing::MessageRing(void* base, size_t capacity)
    : header_(static_cast<Header*>(base)),
      data_(static_cast<char*>(base) + kHeaderBytes),
      capacity_(capacity),
      data_bell_(&header_->head.bell),
      space_bell_(&header_->tail.bell) {}

absl::StatusOr<uint64_t> MessageRing::Used(uint64_t head, uint64_t tail) const {
  const uint64_t used = head - tail;
  if (used > capacity_ || used % 8 != 0 || head % 8 != 0) {
    return absl::DataLossError(absl::StrCat("shared-memory ring of ", capacity_,
                                            " bytes is corrupt: head ", head,
                                            ", tail ", tail));
  }
  return used;
}

absl::StatusOr<bool> MessageRing::TryPush(absl::string_view record) {
  if (record.size() > max_record_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a record of ", record.size(),
                     " bytes exceeds the shared-memory "
                     "ring's limit of ",
                     max_record_bytes()));
  }
  const uint64_t head = header_->head.index.load(std::memory_order_relaxed);
  const uint64_t tail = header_->tail.index.load(std::memory_order_acquire);
  REDUCER_ASSIGN_OR_RETURN(const uint64_t used, Used(head, tail));
  const uint64_t at = head % capacity_;
  const uint64_t to_end = capacity_ - at;
  const uint64_t record_bytes = 8 + Padded(record.size());
  const bool wraps = record_bytes > to_end;
  const uint64_t needed = record_bytes + (wraps ? to_end : 0);
  if (used + needed > capacity_) return false;
  uint64_t start = at;
  if (wraps) {
    std::memcpy(data_ + at, &kWrapMarker, 8);
    start = 0;
  }
  const uint64_t length = record.size();
  std::memcpy(data_ + start, &length, 8);
  if (!record.empty())
    std::memcpy(data_ + start + 8, record.data(), record.size());
  header_->head.index.store(head + needed, std::memory_order_release);
  data_bell_.Ring();
  return true;
}

absl::Status MessageRing::Push(absl::string_view record, absl::Time deadline) {
  const absl::Time start = absl::Now();
  while (true) {
    const uint32_t seen = space_bell_.value();
    REDUCER_ASSIGN_OR_RETURN(const bool pushed, TryPush(record));
    if (pushed) return absl::OkStatus();
    const absl::StatusOr<uint32_t> waited =
        space_bell_.WaitChange(seen, deadline);
    if (waited.ok()) continue;
    if (waited.status().code() == absl::StatusCode::kPermissionDenied &&
        absl::Now() < deadline) {
      // The kernel refuses to sleep on the bell (a seccomp profile that
      // answers futex with EPERM): look again every millisecond.
      absl::SleepFor(std::min(deadline - absl::Now(), absl::Milliseconds(1)));
      continue;
    }
    return absl::DeadlineExceededError(
        absl::StrCat("the shared-memory ring stayed full for ",
                     absl::FormatDuration(absl::Now() - start),
                     ": its reader (the other process) is not consuming"));
  }
}

absl::StatusOr<bool> MessageRing::TryPop(std::string* record) {
  uint64_t tail = header_->tail.index.load(std::memory_order_relaxed);
  const uint64_t head = header_->head.index.load(std::memory_order_acquire);
  REDUCER_ASSIGN_OR_RETURN(const uint64_t used, Used(head, tail));
  if (used == 0) return false;
  uint64_t at = tail % capacity_;
  uint64_t length;
  std::memcpy(&length, data_ + at, 8);
  uint64_t available = used;
  if (length == kWrapMarker) {
    const uint64_t to_end = capacity_ - at;
    if (to_end >= available) {
      return absl::DataLossError(
          absl::StrCat("shared-memory ring of ", capacity_,
                       " bytes is corrupt: a wrap "
                       "marker at ",
                       at, " with only ", available, " bytes published"));
    }
    available -= to_end;
    tail += to_end;
    at = 0;
    std::memcpy(&length, data_, 8);
  }
  if (length > max_record_bytes() || 8 + Padded(length) > available) {
    return absl::DataLossError(absl::StrCat(
        "shared-memory ring of ", capacity_, " bytes is corrupt: a record of ",
        length, " bytes at ", at, " with ", available, " bytes published"));
  }
  // A producer wraps a record that would not fit before the buffer's end.
  if (8 + Padded(length) > capacity_ - at) {
    return absl::DataLossError(absl::StrCat(
        "shared-memory ring of ", capacity_, " bytes is corrupt: a record of ",
        length, " bytes at ", at, " runs past the buffer's end"));
  }
  record->assign(data_ + at + 8, length);
  header_->tail.index.store(tail + 8 + Padded(length),
                            std::memory_order_release);
  space_bell_.Ring();
  return true;
}

}  // namespace reducer

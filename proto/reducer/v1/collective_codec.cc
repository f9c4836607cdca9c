#include "proto/reducer/v1/collective_codec.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reducer {
namespace {

constexpr int kWireVarint = 0;
constexpr int kWireFixed64 = 1;
constexpr int kWireLengthDelimited = 2;
constexpr int kWireFixed32 = 5;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Reads a byte stream spread over slices, front to back.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    SkipEmpty();
  }

  bool AtEnd() const { return index_ == slices_.size(); }

  bool ReadByte(uint8_t* byte) {
    if (AtEnd()) return false;
    *byte = slices_[index_].begin()[pos_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // Moves the next `n` bytes out as slices sharing the received memory.
  bool Take(uint64_t n, SliceRange* out) {
    while (n > 0) {
      if (AtEnd()) return false;
      const grpc::Slice& s = slices_[index_];
      size_t here = std::min<uint64_t>(n, s.size() - pos_);
      out->Append(s.sub(pos_, pos_ + here));
      Advance(here);
      n -= here;
    }
    return true;
  }

  // Appends the next `n` bytes to `out` (for the small non-data fields).
  bool Copy(uint64_t n, std::string* out) {
    while (n > 0) {
      if (AtEnd()) return false;
      const grpc::Slice& s = slices_[index_];
      size_t here = std::min<uint64_t>(n, s.size() - pos_);
      out->append(reinterpret_cast<const char*>(s.begin()) + pos_, here);
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    if (pos_ == slices_[index_].size()) {
      ++index_;
      pos_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed Collective stream message: ", what));
}

}  // namespace

void SliceRange::Append(grpc::Slice slice) {
  size_ += slice.size();
  slices_.push_back(std::move(slice));
}

void SliceRange::CopyTo(void* dest) const {
  char* out = static_cast<char*>(dest);
  for (const grpc::Slice& s : slices_) {
    if (s.size() == 0) continue;
    std::memcpy(out, s.begin(), s.size());
    out += s.size();
  }
}

void SliceRange::CopyTo(size_t begin, size_t n, void* dest) const {
  char* out = static_cast<char*>(dest);
  for (const grpc::Slice& s : slices_) {
    if (n == 0) return;
    if (begin >= s.size()) {
      begin -= s.size();
      continue;
    }
    size_t here = std::min(n, s.size() - begin);
    std::memcpy(out, s.begin() + begin, here);
    out += here;
    n -= here;
    begin = 0;
  }
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& fields,
                               absl::Span<const grpc::Slice> data) {
  return EncodeMessage(fields, grpc::Slice(), data);
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& fields,
                               const grpc::Slice& encoded_fields,
                               absl::Span<const grpc::Slice> data) {
  std::string head = fields.SerializeAsString();
  size_t data_bytes = 0;
  for (const grpc::Slice& s : data) data_bytes += s.size();
  if (data_bytes > 0) {
    AppendVarint((kDataFieldNumber << 3) | kWireLengthDelimited, &head);
    AppendVarint(data_bytes, &head);
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(data.size() + 2);
  // Protobuf fields may come in any order; the data field's bytes must
  // follow its tag and length, which end `head`.
  if (encoded_fields.size() > 0) slices.push_back(encoded_fields);
  slices.emplace_back(head);  // copies the few header bytes
  if (data_bytes > 0) {
    for (const grpc::Slice& s : data) {
      if (s.size() > 0) slices.push_back(s);
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::Slice EncodeField(int field_number,
                        const google::protobuf::MessageLite& message) {
  const size_t size = message.ByteSizeLong();
  std::string head;  // tag and length
  AppendVarint((static_cast<uint64_t>(field_number) << 3) | kWireLengthDelimited,
               &head);
  AppendVarint(size, &head);
  grpc::Slice out(head.size() + size);
  // A fresh slice of our own: its bytes are ours to write.
  uint8_t* bytes = const_cast<uint8_t*>(out.begin());
  std::memcpy(bytes, head.data(), head.size());
  message.SerializeWithCachedSizesToArray(bytes + head.size());
  return out;
}

absl::Status DecodeMessage(grpc::ByteBuffer* buffer,
                           google::protobuf::MessageLite* fields,
                           SliceRange* data) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return Malformed("unreadable buffer");
  buffer->Clear();
  SliceReader reader(slices);
  std::string other_fields;  // every field but `data`, re-parsed below
  while (!reader.AtEnd()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return Malformed("truncated field tag");
    const uint64_t field = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (field == 0) return Malformed("field number 0");
    if (field == kDataFieldNumber) {
      if (wire_type != kWireLengthDelimited) {
        return Malformed("field 15 (data) is not length-delimited");
      }
      uint64_t length;
      if (!reader.ReadVarint(&length)) return Malformed("truncated data length");
      SliceRange chunk;
      if (!reader.Take(length, &chunk)) {
        return Malformed(absl::StrCat("data field of ", length,
                                      " bytes runs past the message end"));
      }
      // Protobuf concatenates repeated occurrences of a bytes field's last
      // value; the last one wins.
      *data = std::move(chunk);
      continue;
    }
    AppendVarint(tag, &other_fields);
    switch (wire_type) {
      case kWireVarint: {
        uint64_t v;
        if (!reader.ReadVarint(&v)) return Malformed("truncated varint");
        AppendVarint(v, &other_fields);
        break;
      }
      case kWireFixed64:
        if (!reader.Copy(8, &other_fields)) return Malformed("truncated fixed64");
        break;
      case kWireFixed32:
        if (!reader.Copy(4, &other_fields)) return Malformed("truncated fixed32");
        break;
      case kWireLengthDelimited: {
        uint64_t length;
        if (!reader.ReadVarint(&length)) return Malformed("truncated length");
        AppendVarint(length, &other_fields);
        if (!reader.Copy(length, &other_fields)) {
          return Malformed(absl::StrCat("field ", field, " of ", length,
                                        " bytes runs past the message end"));
        }
        break;
      }
      default:
        return Malformed(absl::StrCat("field ", field, " has wire type ",
                                      wire_type));
    }
  }
  if (!fields->ParseFromString(other_fields)) {
    return Malformed("header fields do not parse");
  }
  return absl::OkStatus();
}

}  // namespace reducer

// cifarnet/io/protobuf.hpp — the protocol-buffer wire format, by hand, for
// the few small messages cifarnet reads and writes (TensorBoard events,
// tf.train.Example records).
//
// Writing follows proto3 as libprotobuf serializes it: fields in field-number
// order; scalar fields equal to their default (0, bitwise +0.0, empty) are
// omitted unless they belong to a oneof; repeated numbers are packed;
// negative int32/int64 are 10-byte varints. Reading accepts any valid
// encoding (any field order, packed or unpacked repeated numbers), skips
// unknown fields, and throws DataError naming the file and the byte offset
// of anything truncated or malformed.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet::io::pb {

enum Wire : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline void put_tag(std::string& out, int field, Wire wire) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire));
}
inline void put_fixed64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}
inline void put_fixed32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
}
inline std::uint64_t bits_of(double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}

/// double field; omitted when +0.0 unless `always` (oneof members).
inline void put_double(std::string& out, int field, double v, bool always = false) {
  if (!always && bits_of(v) == 0) return;
  put_tag(out, field, kFixed64);
  put_fixed64(out, bits_of(v));
}
/// float field; omitted when +0.0f unless `always`.
inline void put_float(std::string& out, int field, float v, bool always = false) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  if (!always && u == 0) return;
  put_tag(out, field, kFixed32);
  put_fixed32(out, u);
}
/// int64 / int32 field (negative values sign-extended to 10 bytes); omitted when 0.
inline void put_int(std::string& out, int field, std::int64_t v, bool always = false) {
  if (!always && v == 0) return;
  put_tag(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(v));
}
/// string / bytes / embedded message; omitted when empty unless `always`.
inline void put_bytes(std::string& out, int field, std::string_view s, bool always = false) {
  if (!always && s.empty()) return;
  put_tag(out, field, kLengthDelimited);
  put_varint(out, s.size());
  out.append(s.data(), s.size());
}
/// packed repeated double; omitted when empty.
inline void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  if (v.empty()) return;
  put_tag(out, field, kLengthDelimited);
  put_varint(out, 8 * v.size());
  for (double d : v) put_fixed64(out, bits_of(d));
}

/// Reads one message's fields from a byte range.
class Reader {
 public:
  /// `base` is the range's offset in `file`, for error messages.
  Reader(std::string_view bytes, std::string file, std::uint64_t base, std::string what)
      : p_(bytes.data()),
        begin_(bytes.data()),
        end_(bytes.data() + bytes.size()),
        file_(std::move(file)),
        base_(base),
        what_(std::move(what)) {}

  bool done() const { return p_ == end_; }
  std::uint64_t offset() const { return base_ + static_cast<std::uint64_t>(p_ - begin_); }

  /// Next field's number and wire type.
  void next(int& field, int& wire) {
    const std::uint64_t at = offset();
    key_at_ = at;
    const std::uint64_t key = varint();
    field = static_cast<int>(key >> 3);
    wire = static_cast<int>(key & 7);
    if (field == 0 || (key >> 3) > 0x1FFFFFFF ||
        (wire != kVarint && wire != kFixed64 && wire != kLengthDelimited && wire != kFixed32))
      throw error(at, cifarnet::detail::concat("invalid field key ", key));
  }
  std::uint64_t varint() {
    const std::uint64_t at = offset();
    std::uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) throw error(at, "truncated varint");
      const auto b = static_cast<std::uint8_t>(*p_++);
      if (shift == 63 && b > 1) throw error(at, "varint longer than 64 bits");
      v |= std::uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw error(at, "varint longer than 10 bytes");
  }
  std::uint64_t fixed64() { return little_endian(8, "fixed64"); }
  std::uint32_t fixed32() { return static_cast<std::uint32_t>(little_endian(4, "fixed32")); }
  double read_double() {
    const std::uint64_t u = fixed64();
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  }
  float read_float() {
    const std::uint32_t u = fixed32();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  /// A length-delimited field's bytes; `start` receives their file offset.
  std::string_view bytes(std::uint64_t* start = nullptr) {
    const std::uint64_t at = offset();
    const std::uint64_t n = varint();
    if (n > static_cast<std::uint64_t>(end_ - p_))
      throw error(at, cifarnet::detail::concat("length ", n, " runs past the end of the message (",
                                               static_cast<std::uint64_t>(end_ - p_), " bytes left)"));
    if (start) *start = offset();
    std::string_view s(p_, static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  /// Reads a field of wire type `wire` as a double list element (packed or not).
  void doubles(int wire, std::vector<double>& out) {
    if (wire == kFixed64) {
      out.push_back(read_double());
      return;
    }
    expect(wire, kLengthDelimited, "repeated double");
    std::uint64_t start = 0;
    const auto s = bytes(&start);
    if (s.size() % 8 != 0)
      throw error(start,
                  cifarnet::detail::concat("packed doubles of ", s.size(), " bytes, not a multiple of 8"));
    for (std::size_t i = 0; i < s.size(); i += 8) {
      std::uint64_t u = 0;
      for (int k = 7; k >= 0; --k) u = (u << 8) | static_cast<std::uint8_t>(s[i + std::size_t(k)]);
      double d;
      std::memcpy(&d, &u, 8);
      out.push_back(d);
    }
  }
  void skip(int wire) {
    switch (wire) {
      case kVarint:
        varint();
        break;
      case kFixed64:
        need(8, "fixed64");
        p_ += 8;
        break;
      case kFixed32:
        need(4, "fixed32");
        p_ += 4;
        break;
      default:
        bytes();
        break;
    }
  }
  /// Throws when a known field arrives with another wire type (at the field's key).
  void expect(int wire, int wanted, const char* field_name) {
    if (wire != wanted)
      throw error(key_at_,
                  cifarnet::detail::concat(field_name, " has wire type ", wire, ", expected ", wanted));
  }
  DataError error(std::uint64_t at, const std::string& what) const {
    return DataError(cifarnet::detail::at_file(file_, at, what_ + ": " + what));
  }
  const std::string& file() const { return file_; }

 private:
  std::uint64_t little_endian(int n, const char* what) {
    need(std::size_t(n), what);
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p_[i]);
    p_ += n;
    return v;
  }
  void need(std::size_t n, const char* what) {
    if (static_cast<std::size_t>(end_ - p_) < n)
      throw error(offset(), cifarnet::detail::concat("truncated ", what));
  }
  const char *p_, *begin_, *end_;
  std::string file_;
  std::uint64_t base_;
  std::string what_;
  std::uint64_t key_at_ = 0;
};

}  // namespace cifarnet::io::pb

// cifarnet/io/protobuf.hpp — the protocol-buffer wire format, by hand, for
// the few small messages cifarnet reads and writes (TensorBoard events in
// io/tfevents.hpp, tf.train.Example records in data/example.hpp).
//
// Writing follows proto3 as libprotobuf serializes it: fields in field-number
// order; scalar fields equal to their default (0, bitwise +0.0, empty) are
// omitted unless they belong to a oneof; repeated numbers are packed;
// negative int32/int64 are 10-byte varints. Reading accepts any valid
// encoding (any field order, packed or unpacked repeated numbers), skips
// unknown fields, and throws DataError naming the file and the byte offset
// where the truncated or malformed element (key, varint, length) starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cifarnet/core/endian.hpp"
#include "cifarnet/core/error.hpp"

namespace cifarnet::io::pb {

enum Wire : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

/// Bytes the base-128 varint of `v` takes (1 to 10).
inline std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline std::uint64_t key_of(int field, Wire wire) {
  return (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire);
}
inline void put_tag(std::string& out, int field, Wire wire) { put_varint(out, key_of(field, wire)); }
inline void put_fixed64(std::string& out, std::uint64_t v) { cifarnet::detail::append_le(out, v); }
inline void put_fixed32(std::string& out, std::uint32_t v) { cifarnet::detail::append_le(out, v); }
/// Tag and length of a length-delimited field; its `len` bytes follow.
inline void put_len(std::string& out, int field, std::size_t len) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, len);
}
/// Bytes a length-delimited field with `len` payload bytes takes in all.
inline std::size_t len_field_size(int field, std::size_t len) {
  return varint_size(key_of(field, kLengthDelimited)) + varint_size(len) + len;
}
inline std::uint64_t bits_of(double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}
inline std::uint32_t bits_of(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
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
  if (!always && bits_of(v) == 0) return;
  put_tag(out, field, kFixed32);
  put_fixed32(out, bits_of(v));
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
  put_len(out, field, s.size());
  out.append(s.data(), s.size());
}
/// packed repeated double; omitted when empty.
inline void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  if (v.empty()) return;
  put_len(out, field, 8 * v.size());
  for (double d : v) put_fixed64(out, bits_of(d));
}

/// Reads one message's fields from a byte range. The reader views its
/// bytes, file name and message name without copying them: they must
/// outlive it.
class Reader {
 public:
  /// `base` is the range's offset in `file`; `what` (the message's name)
  /// starts every error message.
  Reader(std::string_view bytes, std::string_view file, std::uint64_t base, std::string_view what)
      : p_(bytes.data()),
        begin_(bytes.data()),
        end_(bytes.data() + bytes.size()),
        file_(file),
        base_(base),
        what_(what) {}

  bool done() const { return p_ == end_; }
  std::uint64_t offset() const { return base_ + static_cast<std::uint64_t>(p_ - begin_); }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }
  /// Offset of the key last read by next().
  std::uint64_t key_offset() const { return key_at_; }

  /// Next field's number and wire type (groups, wire types 3 and 4, are
  /// not supported).
  void next(int& field, int& wire) {
    const std::uint64_t at = offset();
    key_at_ = at;
    const std::uint64_t key = varint();
    if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF)
      throw error(at, cifarnet::detail::concat("invalid field number ", key >> 3));
    field = static_cast<int>(key >> 3);
    wire = static_cast<int>(key & 7);
    if (wire != kVarint && wire != kFixed64 && wire != kLengthDelimited && wire != kFixed32)
      throw error(at, cifarnet::detail::concat("unsupported wire type ", wire, " (field ", field, ")"));
  }
  std::uint64_t varint() {
    const std::uint64_t at = offset();
    std::uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) throw error(at, "truncated varint");
      const auto b = static_cast<std::uint8_t>(*p_++);
      if (shift == 63 && b > 1) throw error(at, "varint overflows 64 bits");
      v |= std::uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw error(at, "varint longer than 10 bytes");
  }
  std::uint64_t fixed64() {
    need(8, "fixed64");
    p_ += 8;
    return cifarnet::detail::get_le64(p_ - 8);
  }
  std::uint32_t fixed32() {
    need(4, "fixed32");
    p_ += 4;
    return cifarnet::detail::get_le32(p_ - 4);
  }
  double read_double() { return from_bits<double>(fixed64()); }
  float read_float() { return from_bits<float>(fixed32()); }
  /// A length-delimited field's bytes; `start` receives their file offset.
  std::string_view bytes(std::uint64_t* start = nullptr) {
    const std::uint64_t at = offset();
    const std::uint64_t n = varint();
    if (n > remaining())
      throw error(at, cifarnet::detail::concat("length ", n, " runs past the end of the message (",
                                               remaining(), " bytes left)"));
    if (start) *start = offset();
    std::string_view s(p_, static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  /// The embedded message in a field of wire type `wire` (which must be
  /// length-delimited; `field_name` names the field if not). Errors inside
  /// it start with `what`, by default this reader's.
  Reader message(int wire, const char* field_name, std::string_view what = {}) {
    expect(wire, kLengthDelimited, field_name);
    std::uint64_t start = 0;
    const auto b = bytes(&start);
    return Reader(b, file_, start, what.empty() ? what_ : what);
  }
  /// Calls fn(T) for a repeated fixed-width field (float: T = float, wire
  /// type 5; double: T = double, wire type 1): one value if unpacked, each
  /// value of a packed run otherwise.
  template <class T, class Fn>
  void for_each_fixed(int wire, const char* field_name, Fn&& fn) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cifarnet: fixed-width protobuf values are 4 or 8 bytes");
    constexpr int unpacked = sizeof(T) == 8 ? kFixed64 : kFixed32;
    if (wire == unpacked) {
      if constexpr (sizeof(T) == 8)
        fn(from_bits<T>(fixed64()));
      else
        fn(from_bits<T>(fixed32()));
      return;
    }
    expect(wire, kLengthDelimited, field_name);
    std::uint64_t start = 0;
    const auto s = bytes(&start);
    if (s.size() % sizeof(T) != 0)
      throw error(start, cifarnet::detail::concat("packed ", field_name, " of ", s.size(),
                                                  " bytes, not a multiple of ", sizeof(T)));
    for (std::size_t i = 0; i < s.size(); i += sizeof(T)) {
      if constexpr (sizeof(T) == 8)
        fn(from_bits<T>(cifarnet::detail::get_le64(s.data() + i)));
      else
        fn(from_bits<T>(cifarnet::detail::get_le32(s.data() + i)));
    }
  }
  /// Calls fn(uint64) for a repeated varint field: one value if unpacked,
  /// each value of a packed run otherwise.
  template <class Fn>
  void for_each_varint(int wire, const char* field_name, Fn&& fn) {
    if (wire == kVarint) {
      fn(varint());
      return;
    }
    for (Reader packed = message(wire, field_name); !packed.done();) fn(packed.varint());
  }
  /// Appends a repeated double field's values (packed or not) to `out`.
  void doubles(int wire, std::vector<double>& out) {
    for_each_fixed<double>(wire, "repeated double", [&](double d) { out.push_back(d); });
  }
  void skip(int wire) {
    switch (wire) {
      case kVarint:
        varint();
        break;
      case kFixed64:
        fixed64();
        break;
      case kFixed32:
        fixed32();
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
    return DataError(
        cifarnet::detail::at_file(std::string(file_), at, cifarnet::detail::concat(what_, ": ", what)));
  }
  std::string_view file() const { return file_; }

 private:
  template <class T, class U>
  static T from_bits(U u) {
    static_assert(sizeof(T) == sizeof(U), "cifarnet: from_bits needs types of one size");
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
  }
  void need(std::size_t n, const char* what) {
    if (remaining() < n) throw error(offset(), cifarnet::detail::concat("truncated ", what));
  }
  const char *p_, *begin_, *end_;
  std::string_view file_;
  std::uint64_t base_;
  std::string_view what_;
  std::uint64_t key_at_ = 0;
};

}  // namespace cifarnet::io::pb

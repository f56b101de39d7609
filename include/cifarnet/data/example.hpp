// cifarnet/data/example.hpp — tf.train.Example encoded and decoded by hand
// (protobuf wire format), without a protobuf dependency.
//
// The messages (tensorflow/core/example/{example,feature}.proto, proto3):
//   Example   { Features features = 1; }
//   Features  { map<string, Feature> feature = 1; }   // entry: key = 1, value = 2
//   Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                            Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed = true]; }
//   Int64List { repeated int64 value = 1 [packed = true]; }
// Wire format: tag = (field << 3) | wire type; varint (0), 64-bit (1),
// length-delimited (2), 32-bit (5); lengths and int64 values are base-128
// varints, negative int64s take 10 bytes (two's complement).
//
// serialize() writes map entries in the order the Example holds them, with
// both key and value, packed lists, and empty lists omitted — byte for byte
// what TensorFlow's Python protobuf writes (checked against golden files in
// tests/data/golden/). The parser accepts any valid encoding: fields in any
// order, unknown fields skipped, unpacked repeated scalars, repeated
// messages merged, the last value of a duplicated map key winning. Malformed
// input is a DataError naming the file and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet {
namespace data {

/// One tf.train.Feature: a list of bytes, floats or int64s.
struct Feature {
  enum class Kind { none, bytes_list, float_list, int64_list };
  Kind kind = Kind::none;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<std::int64_t> int64s;

  static Feature of_bytes(std::string v) {
    Feature f;
    f.kind = Kind::bytes_list;
    f.bytes.push_back(std::move(v));
    return f;
  }
  static Feature of_int64(std::int64_t v) {
    Feature f;
    f.kind = Kind::int64_list;
    f.int64s.push_back(v);
    return f;
  }
  static Feature of_floats(std::vector<float> v) {
    Feature f;
    f.kind = Kind::float_list;
    f.floats = std::move(v);
    return f;
  }
  bool operator==(const Feature& o) const {
    return kind == o.kind && bytes == o.bytes && floats == o.floats && int64s == o.int64s;
  }
};

/// One tf.train.Example: named features, in serialization order.
struct Example {
  std::vector<std::pair<std::string, Feature>> features;

  const Feature* find(const std::string& name) const {
    for (const auto& kv : features)
      if (kv.first == name) return &kv.second;
    return nullptr;
  }
  /// Sets a feature (replaces an existing one of that name, in place).
  void set(const std::string& name, Feature f) {
    for (auto& kv : features)
      if (kv.first == name) {
        kv.second = std::move(f);
        return;
      }
    features.emplace_back(name, std::move(f));
  }
};

namespace proto {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

inline std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
inline void put_tag(std::string& out, std::uint32_t field, WireType wt) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | wt);
}
/// Length-delimited field header: tag + length.
inline void put_len(std::string& out, std::uint32_t field, std::size_t len) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, len);
}
inline std::size_t len_field_size(std::uint32_t field, std::size_t len) {
  return varint_size((static_cast<std::uint64_t>(field) << 3) | kLengthDelimited) + varint_size(len) + len;
}

/// A bounds-checked cursor over an encoded message. Every error names the
/// file and the absolute byte offset (base + position).
class Cursor {
 public:
  Cursor(const std::uint8_t* begin, const std::uint8_t* end, const std::string& file, std::uint64_t base)
      : start_(begin), p_(begin), end_(end), file_(&file), base_(base) {}

  bool done() const { return p_ >= end_; }
  std::uint64_t offset() const { return base_ + static_cast<std::uint64_t>(p_ - start_); }
  const std::uint8_t* pos() const { return p_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(cifarnet::detail::at_file(*file_, offset(), "tf.train.Example: " + what));
  }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      const std::uint8_t b = *p_++;
      if (shift == 63 && b > 1) fail("varint overflows 64 bits");
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  /// Reads a tag; returns field number and wire type.
  std::pair<std::uint32_t, std::uint32_t> tag() {
    const std::uint64_t t = varint();
    const std::uint64_t field = t >> 3;
    if (field == 0 || field > 0x1FFFFFFFu) fail(cifarnet::detail::concat("invalid field number ", field));
    return {static_cast<std::uint32_t>(field), static_cast<std::uint32_t>(t & 7)};
  }
  /// Reads a length prefix and returns a cursor over that many bytes.
  Cursor sub() {
    const std::uint64_t n = varint();
    if (n > static_cast<std::uint64_t>(end_ - p_))
      fail(cifarnet::detail::concat("length ", n, " runs past the end of the message (", end_ - p_,
                                    " bytes left)"));
    Cursor c(p_, p_ + n, *file_, offset());
    p_ += n;
    return c;
  }
  std::uint32_t fixed32() {
    if (end_ - p_ < 4) fail("truncated fixed32");
    std::uint32_t v = std::uint32_t(p_[0]) | std::uint32_t(p_[1]) << 8 | std::uint32_t(p_[2]) << 16 |
                      std::uint32_t(p_[3]) << 24;
    p_ += 4;
    return v;
  }
  void skip(std::uint32_t wire_type) {
    switch (wire_type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        if (end_ - p_ < 8) fail("truncated fixed64");
        p_ += 8;
        return;
      case kLengthDelimited:
        sub();
        return;
      case kFixed32:
        fixed32();
        return;
      default:
        fail(cifarnet::detail::concat("unsupported wire type ", wire_type));
    }
  }
  void expect(std::uint32_t got, std::uint32_t want, const char* what) const {
    if (got != want) fail(cifarnet::detail::concat(what, ": wire type ", got, ", expected ", want));
  }
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }
  const std::string& file() const { return *file_; }

 private:
  const std::uint8_t* start_;
  const std::uint8_t* p_;
  const std::uint8_t* end_;
  const std::string* file_;
  std::uint64_t base_;
};

inline std::size_t feature_body_size(const Feature& f) {
  std::size_t list = 0;
  switch (f.kind) {
    case Feature::Kind::none:
      return 0;
    case Feature::Kind::bytes_list:
      for (const auto& b : f.bytes) list += len_field_size(1, b.size());
      return len_field_size(1, list);
    case Feature::Kind::float_list:
      if (!f.floats.empty()) list = len_field_size(1, 4 * f.floats.size());
      return len_field_size(2, list);
    case Feature::Kind::int64_list: {
      std::size_t packed = 0;
      for (auto v : f.int64s) packed += varint_size(static_cast<std::uint64_t>(v));
      if (!f.int64s.empty()) list = len_field_size(1, packed);
      return len_field_size(3, list);
    }
  }
  return 0;
}

inline void put_feature_body(std::string& out, const Feature& f) {
  switch (f.kind) {
    case Feature::Kind::none:
      return;
    case Feature::Kind::bytes_list: {
      std::size_t list = 0;
      for (const auto& b : f.bytes) list += len_field_size(1, b.size());
      put_len(out, 1, list);
      for (const auto& b : f.bytes) {
        put_len(out, 1, b.size());
        out.append(b);
      }
      return;
    }
    case Feature::Kind::float_list: {
      put_len(out, 2, f.floats.empty() ? 0 : len_field_size(1, 4 * f.floats.size()));
      if (f.floats.empty()) return;
      put_len(out, 1, 4 * f.floats.size());
      for (float v : f.floats) {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
      }
      return;
    }
    case Feature::Kind::int64_list: {
      std::size_t packed = 0;
      for (auto v : f.int64s) packed += varint_size(static_cast<std::uint64_t>(v));
      put_len(out, 3, f.int64s.empty() ? 0 : len_field_size(1, packed));
      if (f.int64s.empty()) return;
      put_len(out, 1, packed);
      for (auto v : f.int64s) put_varint(out, static_cast<std::uint64_t>(v));
      return;
    }
  }
}

inline std::size_t entry_size(const std::string& key, const Feature& f) {
  return len_field_size(1, key.size()) + len_field_size(2, feature_body_size(f));
}

}  // namespace proto

/// Serializes an Example (entries in the order held).
inline std::string serialize(const Example& ex) {
  std::size_t features = 0;
  for (const auto& kv : ex.features)
    features += proto::len_field_size(1, proto::entry_size(kv.first, kv.second));
  std::string out;
  out.reserve(proto::len_field_size(1, features));
  proto::put_len(out, 1, features);
  for (const auto& kv : ex.features) {
    proto::put_len(out, 1, proto::entry_size(kv.first, kv.second));
    proto::put_len(out, 1, kv.first.size());
    out.append(kv.first);
    proto::put_len(out, 2, proto::feature_body_size(kv.second));
    proto::put_feature_body(out, kv.second);
  }
  return out;
}

namespace proto {

inline void parse_bytes_list(Cursor c, std::vector<std::string>& out) {
  while (!c.done()) {
    const auto [field, wt] = c.tag();
    if (field == 1) {
      c.expect(wt, kLengthDelimited, "BytesList.value");
      Cursor v = c.sub();
      out.emplace_back(reinterpret_cast<const char*>(v.pos()), v.remaining());
    } else {
      c.skip(wt);
    }
  }
}

inline void parse_float_list(Cursor c, std::vector<float>& out) {
  const auto push = [&](std::uint32_t u) {
    float v;
    std::memcpy(&v, &u, 4);
    out.push_back(v);
  };
  while (!c.done()) {
    const auto [field, wt] = c.tag();
    if (field == 1 && wt == kLengthDelimited) {
      Cursor packed = c.sub();
      if (packed.remaining() % 4 != 0) packed.fail("packed FloatList length is not a multiple of 4");
      while (!packed.done()) push(packed.fixed32());
    } else if (field == 1 && wt == kFixed32) {
      push(c.fixed32());
    } else if (field == 1) {
      c.fail(cifarnet::detail::concat("FloatList.value: unexpected wire type ", wt));
    } else {
      c.skip(wt);
    }
  }
}

inline void parse_int64_list(Cursor c, std::vector<std::int64_t>& out) {
  while (!c.done()) {
    const auto [field, wt] = c.tag();
    if (field == 1 && wt == kLengthDelimited) {
      Cursor packed = c.sub();
      while (!packed.done()) out.push_back(static_cast<std::int64_t>(packed.varint()));
    } else if (field == 1 && wt == kVarint) {
      out.push_back(static_cast<std::int64_t>(c.varint()));
    } else if (field == 1) {
      c.fail(cifarnet::detail::concat("Int64List.value: unexpected wire type ", wt));
    } else {
      c.skip(wt);
    }
  }
}

/// Merges an encoded Feature into f (protobuf merge semantics for a oneof).
inline void parse_feature(Cursor c, Feature& f) {
  while (!c.done()) {
    const auto [field, wt] = c.tag();
    if (field >= 1 && field <= 3) {
      c.expect(wt, kLengthDelimited, "Feature.kind");
      const auto kind = static_cast<Feature::Kind>(field);
      if (f.kind != kind) f = Feature{};
      f.kind = kind;
      if (field == 1) parse_bytes_list(c.sub(), f.bytes);
      if (field == 2) parse_float_list(c.sub(), f.floats);
      if (field == 3) parse_int64_list(c.sub(), f.int64s);
    } else {
      c.skip(wt);
    }
  }
}

/// Calls fn(key_cursor, value_cursor_or_null) for every map entry of an
/// encoded Example, in file order. Shared by the full and the fast parser.
template <class Fn>
void for_each_entry(Cursor c, Fn&& fn) {
  while (!c.done()) {
    const auto [field, wt] = c.tag();
    if (field != 1) {
      c.skip(wt);
      continue;
    }
    c.expect(wt, kLengthDelimited, "Example.features");
    Cursor features = c.sub();
    while (!features.done()) {
      const auto [ff, fwt] = features.tag();
      if (ff != 1) {
        features.skip(fwt);
        continue;
      }
      features.expect(fwt, kLengthDelimited, "Features.feature");
      Cursor entry = features.sub();
      std::string key;
      bool has_value = false;
      Cursor value = entry;
      while (!entry.done()) {
        const auto [ef, ewt] = entry.tag();
        if (ef == 1) {
          entry.expect(ewt, kLengthDelimited, "map key");
          Cursor k = entry.sub();
          key.assign(reinterpret_cast<const char*>(k.pos()), k.remaining());
        } else if (ef == 2) {
          entry.expect(ewt, kLengthDelimited, "map value");
          value = entry.sub();
          has_value = true;
        } else {
          entry.skip(ewt);
        }
      }
      fn(key, has_value ? &value : nullptr);
    }
  }
}

}  // namespace proto

/// Parses an encoded Example. `file` and `base_offset` only serve error
/// messages (the offset of the first byte of `data` in that file).
inline Example parse_example(const void* data, std::size_t size, const std::string& file = "<memory>",
                             std::uint64_t base_offset = 0) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  Example ex;
  proto::for_each_entry(proto::Cursor(p, p + size, file, base_offset),
                        [&](const std::string& key, proto::Cursor* value) {
                          Feature f;
                          if (value) proto::parse_feature(*value, f);
                          ex.set(key, std::move(f));
                        });
  return ex;
}

inline Example parse_example(const std::string& bytes, const std::string& file = "<memory>",
                             std::uint64_t base_offset = 0) {
  return parse_example(bytes.data(), bytes.size(), file, base_offset);
}

/// The two features of a CIFAR example, decoded without copying.
struct CifarExampleView {
  const std::uint8_t* image = nullptr;  ///< points into the encoded record
  std::size_t image_size = 0;
  std::int64_t label = 0;
};

/// Encodes a CIFAR example exactly as the seed's generate_cifar10_tfrecords.py
/// (features 'image' = the raw bytes, 'label' = int64, in that order).
inline std::string encode_cifar_example(const std::uint8_t* image, std::size_t n, std::int64_t label) {
  Example ex;
  ex.features.emplace_back("image", Feature::of_bytes(std::string(reinterpret_cast<const char*>(image), n)));
  ex.features.emplace_back("label", Feature::of_int64(label));
  return serialize(ex);
}

/// Decodes the 'image' (one bytes value) and 'label' (one int64 value)
/// features of an encoded Example without copying the image bytes. Other
/// features are ignored. DataError (file, offset) when either is missing or
/// does not hold exactly one value.
inline CifarExampleView decode_cifar_example(const void* data, std::size_t size, const std::string& file,
                                             std::uint64_t base_offset) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  CifarExampleView v;
  int images = -1, labels = -1;  // -1: feature absent; else number of values
  proto::for_each_entry(
      proto::Cursor(p, p + size, file, base_offset), [&](const std::string& key, proto::Cursor* value) {
        if (key != "image" && key != "label") return;
        const bool is_image = key == "image";
        int& count = is_image ? images : labels;
        count = 0;  // a later entry with the same key replaces an earlier one
        if (!value) return;
        proto::Cursor c = *value;
        while (!c.done()) {
          const auto [field, wt] = c.tag();
          if (field == (is_image ? 1u : 3u) && wt == proto::kLengthDelimited) {
            proto::Cursor list = c.sub();
            while (!list.done()) {
              const auto [lf, lwt] = list.tag();
              if (lf != 1) {
                list.skip(lwt);
              } else if (is_image) {
                list.expect(lwt, proto::kLengthDelimited, "BytesList.value");
                proto::Cursor b = list.sub();
                v.image = b.pos();
                v.image_size = b.remaining();
                ++count;
              } else if (lwt == proto::kLengthDelimited) {
                proto::Cursor packed = list.sub();
                while (!packed.done()) {
                  v.label = static_cast<std::int64_t>(packed.varint());
                  ++count;
                }
              } else {
                list.expect(lwt, proto::kVarint, "Int64List.value");
                v.label = static_cast<std::int64_t>(list.varint());
                ++count;
              }
            }
          } else if (field >= 1 && field <= 3) {
            c.fail(cifarnet::detail::concat("feature '", key, "' has the wrong type (expected ",
                                            is_image ? "bytes_list" : "int64_list", ")"));
          } else {
            c.skip(wt);
          }
        }
      });
  const auto where = [&](const std::string& what) {
    return DataError(cifarnet::detail::at_file(file, base_offset, "tf.train.Example: " + what));
  };
  if (images < 0) throw where("feature 'image' is missing");
  if (labels < 0) throw where("feature 'label' is missing");
  if (images != 1)
    throw where(cifarnet::detail::concat("feature 'image' holds ", images, " values, expected 1"));
  if (labels != 1)
    throw where(cifarnet::detail::concat("feature 'label' holds ", labels, " values, expected 1"));
  return v;
}

}  // namespace data
}  // namespace cifarnet

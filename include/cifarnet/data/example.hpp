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
// The wire format (tags, varints, length-delimited fields, the Reader) is
// io/protobuf.hpp's; negative int64s take 10 bytes (two's complement).
//
// serialize() writes map entries in the order the Example holds them, with
// both key and value, packed lists, and empty lists omitted — byte for byte
// what TensorFlow's Python protobuf writes (checked against golden files in
// tests/data/golden/). The parser accepts any valid encoding: fields in any
// order, unknown fields skipped, unpacked repeated scalars, repeated
// messages merged, the last value of a duplicated map key winning. Malformed
// input is a DataError naming the file and the byte offset where the bad
// element starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/io/protobuf.hpp"

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

namespace detail {
namespace pb = io::pb;

inline std::size_t packed_varints_size(const std::vector<std::int64_t>& v) {
  std::size_t n = 0;
  for (auto x : v) n += pb::varint_size(static_cast<std::uint64_t>(x));
  return n;
}
/// Bytes of the BytesList / FloatList / Int64List message inside a Feature.
inline std::size_t list_size(const Feature& f) {
  switch (f.kind) {
    case Feature::Kind::none:
      return 0;
    case Feature::Kind::bytes_list: {
      std::size_t n = 0;
      for (const auto& b : f.bytes) n += pb::len_field_size(1, b.size());
      return n;
    }
    case Feature::Kind::float_list:
      return f.floats.empty() ? 0 : pb::len_field_size(1, 4 * f.floats.size());
    case Feature::Kind::int64_list:
      return f.int64s.empty() ? 0 : pb::len_field_size(1, packed_varints_size(f.int64s));
  }
  return 0;
}
/// Bytes of an encoded Feature: its one list field (the Kind is the field
/// number), nothing for Kind::none.
inline std::size_t feature_body_size(const Feature& f) {
  return f.kind == Feature::Kind::none ? 0 : pb::len_field_size(static_cast<int>(f.kind), list_size(f));
}

inline void put_feature_body(std::string& out, const Feature& f) {
  if (f.kind == Feature::Kind::none) return;
  pb::put_len(out, static_cast<int>(f.kind), list_size(f));
  switch (f.kind) {
    case Feature::Kind::none:
      return;
    case Feature::Kind::bytes_list:
      for (const auto& b : f.bytes) pb::put_bytes(out, 1, b, /*always: repeated*/ true);
      return;
    case Feature::Kind::float_list:
      if (f.floats.empty()) return;
      pb::put_len(out, 1, 4 * f.floats.size());
      for (float v : f.floats) pb::put_fixed32(out, pb::bits_of(v));
      return;
    case Feature::Kind::int64_list:
      if (f.int64s.empty()) return;
      pb::put_len(out, 1, packed_varints_size(f.int64s));
      for (auto v : f.int64s) pb::put_varint(out, static_cast<std::uint64_t>(v));
      return;
  }
}

inline std::size_t entry_size(const std::string& key, const Feature& f) {
  return pb::len_field_size(1, key.size()) + pb::len_field_size(2, feature_body_size(f));
}

}  // namespace detail

/// Serializes an Example (entries in the order held).
inline std::string serialize(const Example& ex) {
  namespace pb = io::pb;
  std::size_t features = 0;
  for (const auto& kv : ex.features)
    features += pb::len_field_size(1, detail::entry_size(kv.first, kv.second));
  std::string out;
  out.reserve(pb::len_field_size(1, features));
  pb::put_len(out, 1, features);
  for (const auto& kv : ex.features) {
    pb::put_len(out, 1, detail::entry_size(kv.first, kv.second));
    pb::put_bytes(out, 1, kv.first, /*always: a map entry keeps its key*/ true);
    pb::put_len(out, 2, detail::feature_body_size(kv.second));
    detail::put_feature_body(out, kv.second);
  }
  return out;
}

namespace detail {

/// A Reader over an encoded Example; errors start with "tf.train.Example".
inline pb::Reader example_reader(const void* data, std::size_t size, const std::string& file,
                                 std::uint64_t base) {
  return pb::Reader(std::string_view(static_cast<const char*>(data), size), file, base, "tf.train.Example");
}

inline void parse_bytes_list(pb::Reader r, std::vector<std::string>& out) {
  int field, wire;
  while (!r.done()) {
    r.next(field, wire);
    if (field == 1) {
      r.expect(wire, pb::kLengthDelimited, "BytesList.value");
      out.emplace_back(r.bytes());
    } else {
      r.skip(wire);
    }
  }
}

inline void parse_float_list(pb::Reader r, std::vector<float>& out) {
  int field, wire;
  while (!r.done()) {
    r.next(field, wire);
    if (field == 1)
      r.for_each_fixed<float>(wire, "FloatList.value", [&](float v) { out.push_back(v); });
    else
      r.skip(wire);
  }
}

inline void parse_int64_list(pb::Reader r, std::vector<std::int64_t>& out) {
  int field, wire;
  while (!r.done()) {
    r.next(field, wire);
    if (field == 1)
      r.for_each_varint(wire, "Int64List.value",
                        [&](std::uint64_t v) { out.push_back(static_cast<std::int64_t>(v)); });
    else
      r.skip(wire);
  }
}

/// Merges an encoded Feature into f (protobuf merge semantics for a oneof).
inline void parse_feature(pb::Reader r, Feature& f) {
  int field, wire;
  while (!r.done()) {
    r.next(field, wire);
    if (field >= 1 && field <= 3) {
      pb::Reader list = r.message(wire, "Feature.kind");
      const auto kind = static_cast<Feature::Kind>(field);
      if (f.kind != kind) f = Feature{};
      f.kind = kind;
      if (field == 1) parse_bytes_list(list, f.bytes);
      if (field == 2) parse_float_list(list, f.floats);
      if (field == 3) parse_int64_list(list, f.int64s);
    } else {
      r.skip(wire);
    }
  }
}

/// Calls fn(key, value_reader_or_null) for every map entry of an encoded
/// Example, in file order. Shared by the full and the fast parser.
template <class Fn>
void for_each_entry(pb::Reader r, Fn&& fn) {
  int field, wire;
  while (!r.done()) {
    r.next(field, wire);
    if (field != 1) {
      r.skip(wire);
      continue;
    }
    pb::Reader features = r.message(wire, "Example.features");
    while (!features.done()) {
      features.next(field, wire);
      if (field != 1) {
        features.skip(wire);
        continue;
      }
      pb::Reader entry = features.message(wire, "Features.feature");
      std::string_view key;
      bool has_value = false;
      pb::Reader value = entry;
      while (!entry.done()) {
        entry.next(field, wire);
        if (field == 1) {
          entry.expect(wire, pb::kLengthDelimited, "map key");
          key = entry.bytes();
        } else if (field == 2) {
          value = entry.message(wire, "map value");
          has_value = true;
        } else {
          entry.skip(wire);
        }
      }
      fn(key, has_value ? &value : nullptr);
    }
  }
}

}  // namespace detail

/// Parses an encoded Example. `file` and `base_offset` only serve error
/// messages (the offset of the first byte of `data` in that file).
inline Example parse_example(const void* data, std::size_t size, const std::string& file = "<memory>",
                             std::uint64_t base_offset = 0) {
  Example ex;
  detail::for_each_entry(detail::example_reader(data, size, file, base_offset),
                         [&](std::string_view key, io::pb::Reader* value) {
                           Feature f;
                           if (value) detail::parse_feature(*value, f);
                           ex.set(std::string(key), std::move(f));
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
  namespace pb = io::pb;
  CifarExampleView v;
  int images = -1, labels = -1;  // -1: feature absent; else number of values
  detail::for_each_entry(
      detail::example_reader(data, size, file, base_offset), [&](std::string_view key, pb::Reader* value) {
        if (key != "image" && key != "label") return;
        const bool is_image = key == "image";
        int& count = is_image ? images : labels;
        count = 0;  // a later entry with the same key replaces an earlier one
        if (!value) return;
        pb::Reader c = *value;
        int field, wire;
        while (!c.done()) {
          c.next(field, wire);
          if (field == (is_image ? 1 : 3) && wire == pb::kLengthDelimited) {
            pb::Reader list = c.message(wire, "Feature.kind");
            int lf, lw;
            while (!list.done()) {
              list.next(lf, lw);
              if (lf != 1) {
                list.skip(lw);
              } else if (is_image) {
                list.expect(lw, pb::kLengthDelimited, "BytesList.value");
                const std::string_view b = list.bytes();
                v.image = reinterpret_cast<const std::uint8_t*>(b.data());
                v.image_size = b.size();
                ++count;
              } else {
                list.for_each_varint(lw, "Int64List.value", [&](std::uint64_t x) {
                  v.label = static_cast<std::int64_t>(x);
                  ++count;
                });
              }
            }
          } else if (field >= 1 && field <= 3) {
            throw c.error(c.key_offset(),
                          cifarnet::detail::concat("feature '", key, "' has the wrong type (expected ",
                                                   is_image ? "bytes_list" : "int64_list", ")"));
          } else {
            c.skip(wire);
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

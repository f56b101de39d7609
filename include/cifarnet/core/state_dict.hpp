// cifarnet/core/state_dict.hpp — the in-memory state type: named tensors of
// any safetensors element type (Dtype, TensorData) plus string metadata
// (StateDict). What a checkpoint holds, and what train/, distributed/ and
// vision/ exchange, without the file format: reading and writing files is
// io/safetensors.hpp (header, JSON, CRC-32C checksums).
//
// The element types follow the safetensors library's enum (its order decides
// the layout of written files); bf16 and f16 are raw 16-bit storage, with
// their exact conversions to float here because TensorData::to_floating
// reads them.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cifarnet/core/error.hpp"

namespace cifarnet {

namespace detail {
/// `v` as `digits` lowercase hex digits (checkpoint metadata: CRCs, RNG states).
inline std::string to_hex(std::uint64_t v, int digits) {
  static const char* hex = "0123456789abcdef";
  std::string s(std::size_t(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[std::size_t(i)] = hex[v & 0xF];
  return s;
}
/// Exactly `digits` lowercase hex digits (at most 16), or nullopt.
inline std::optional<std::uint64_t> parse_hex(std::string_view s, std::size_t digits) {
  if (s.size() != digits || digits > 16) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= std::uint64_t(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= std::uint64_t(c - 'a' + 10);
    else
      return std::nullopt;
  }
  return v;
}
}  // namespace detail

/// Element types of safetensors, in the Python library's enum order (which
/// decides the layout of written files: larger ranks come first).
enum class Dtype : std::uint8_t {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

namespace detail {
struct DtypeInfo {
  Dtype dtype;
  const char* name;
  std::size_t size;
};
inline constexpr DtypeInfo kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1},
    {Dtype::U8, "U8", 1},
    {Dtype::I8, "I8", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::F8_E4M3, "F8_E4M3", 1},
    {Dtype::F8_E8M0, "F8_E8M0", 1},
    {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 1},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 1},
    {Dtype::I16, "I16", 2},
    {Dtype::U16, "U16", 2},
    {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},
    {Dtype::I32, "I32", 4},
    {Dtype::U32, "U32", 4},
    {Dtype::F32, "F32", 4},
    {Dtype::C64, "C64", 8},
    {Dtype::F64, "F64", 8},
    {Dtype::I64, "I64", 8},
    {Dtype::U64, "U64", 8},
};
}  // namespace detail

/// The dtype's name in the header ("F32", "BF16", ...).
inline const char* dtype_name(Dtype d) { return detail::kDtypes[static_cast<int>(d)].name; }
/// Bytes per element.
inline std::size_t dtype_size(Dtype d) { return detail::kDtypes[static_cast<int>(d)].size; }
/// The dtype named `name`, or nullopt.
inline std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& i : detail::kDtypes)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

/// Storage types for 16-bit floats (raw bits; see bf16_to_float etc.).
struct bf16 {
  std::uint16_t bits = 0;
};
struct f16 {
  std::uint16_t bits = 0;
};

/// The safetensors dtype of a C++ element type.
template <class T>
constexpr Dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return Dtype::F32;
  else if constexpr (std::is_same_v<T, double>)
    return Dtype::F64;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return Dtype::I64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return Dtype::U64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return Dtype::I32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return Dtype::U32;
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return Dtype::I16;
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return Dtype::U16;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return Dtype::I8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return Dtype::U8;
  else if constexpr (std::is_same_v<T, bool>)
    return Dtype::BOOL;
  else if constexpr (std::is_same_v<T, bf16>)
    return Dtype::BF16;
  else if constexpr (std::is_same_v<T, f16>)
    return Dtype::F16;
  else
    static_assert(cifarnet::detail::dependent_false<T>,
                  "cifarnet: this element type has no safetensors dtype");
}

/// bfloat16 bits -> float (exact).
inline float bf16_to_float(bf16 h) {
  const std::uint32_t u = std::uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// float -> bfloat16, rounding to nearest even (NaN stays NaN).
inline bf16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}
/// IEEE half bits -> float (exact).
inline float f16_to_float(f16 h) {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
  std::uint32_t exp = (h.bits >> 10) & 0x1Fu, man = h.bits & 0x3FFu, u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (man << 13);  // Inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;  // +-0
  } else {     // subnormal: normalize
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// One tensor: dtype, shape (row-major) and its raw little-endian bytes.
struct TensorData {
  Dtype dtype = Dtype::F32;
  std::vector<std::size_t> shape;
  std::vector<std::uint8_t> bytes;

  /// Element count (1 for a scalar, shape []).
  std::size_t numel() const {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }

  /// A tensor of dtype_of<T>() copied from `values` (numel(shape) elements).
  template <class T>
  static TensorData from(std::vector<std::size_t> shape, const T* values) {
    TensorData t;
    t.dtype = dtype_of<T>();
    t.shape = std::move(shape);
    t.bytes.resize(t.numel() * sizeof(T));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), values, t.bytes.size());
    return t;
  }
  /// As above; the vector's length must equal the shape's element count.
  template <class T>
  static TensorData from(std::vector<std::size_t> shape, const std::vector<T>& values) {
    static_assert(!std::is_same_v<T, bool>,
                  "cifarnet: std::vector<bool> is packed; use std::uint8_t with raw()");
    TensorData t;
    t.shape = std::move(shape);
    if (t.numel() != values.size())
      throw ShapeError(cifarnet::detail::concat("tensor of shape ", shape_string(t.shape), " needs ",
                                                t.numel(), " values, got ", values.size()));
    return from<T>(t.shape, values.data());
  }
  /// A scalar (shape []).
  template <class T>
  static TensorData scalar(T value) {
    return from<T>({}, &value);
  }
  /// A tensor from raw little-endian bytes; their count must fit dtype and shape.
  static TensorData raw(Dtype dtype, std::vector<std::size_t> shape, std::vector<std::uint8_t> bytes) {
    TensorData t{dtype, std::move(shape), std::move(bytes)};
    if (t.numel() * dtype_size(dtype) != t.bytes.size())
      throw ShapeError(cifarnet::detail::concat(dtype_name(dtype), " tensor of shape ", shape_string(t.shape),
                                                " needs ", t.numel() * dtype_size(dtype), " bytes, got ",
                                                t.bytes.size()));
    return t;
  }

  /// The elements as T; T's dtype must be the tensor's dtype exactly.
  template <class T>
  std::vector<T> values() const {
    if (dtype_of<T>() != dtype)
      throw Error(cifarnet::detail::concat("tensor has dtype ", dtype_name(dtype), ", asked for ",
                                           dtype_name(dtype_of<T>())));
    std::vector<T> out(numel());
    if (!bytes.empty()) std::memcpy(static_cast<void*>(out.data()), bytes.data(), bytes.size());
    return out;
  }
  /// The single element of a scalar (or one-element) tensor as T (exact dtype).
  template <class T>
  T item() const {
    if (numel() != 1)
      throw ShapeError(cifarnet::detail::concat("tensor of shape ", shape_string(shape), " is not a scalar"));
    return values<T>()[0];
  }
  /// Floating tensors (F16, BF16, F32, F64) converted to T (float or double).
  template <class T>
  std::vector<T> to_floating() const {
    static_assert(std::is_floating_point_v<T>, "cifarnet: to_floating converts to float or double");
    std::vector<T> out(numel());
    const std::uint8_t* p = bytes.data();
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (dtype) {
        case Dtype::F32: {
          float v;
          std::memcpy(&v, p + 4 * i, 4);
          out[i] = static_cast<T>(v);
          break;
        }
        case Dtype::F64: {
          double v;
          std::memcpy(&v, p + 8 * i, 8);
          out[i] = static_cast<T>(v);
          break;
        }
        case Dtype::BF16:
        case Dtype::F16: {
          std::uint16_t b;
          std::memcpy(&b, p + 2 * i, 2);
          out[i] = static_cast<T>(dtype == Dtype::BF16 ? bf16_to_float(bf16{b}) : f16_to_float(f16{b}));
          break;
        }
        default:
          throw Error(cifarnet::detail::concat("tensor has dtype ", dtype_name(dtype),
                                               ", not a floating type (F16, BF16, F32, F64)"));
      }
    }
    return out;
  }

  /// "[2, 3]"
  static std::string shape_string(const std::vector<std::size_t>& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
  }
};

/// Tensors by name (sorted) plus the header's string metadata: what one
/// safetensors file holds.
class StateDict {
 public:
  using Map = std::map<std::string, TensorData>;

  /// "__metadata__": free-form strings (global step, RNG state, pipeline position...).
  std::map<std::string, std::string> metadata;
  /// Where it was read from (for error messages); empty when built in memory.
  std::string source;

  /// Inserts or replaces a tensor. Names must be non-empty and not "__metadata__".
  void set(const std::string& name, TensorData t) {
    if (name.empty() || name == "__metadata__")
      throw ConfigError("safetensors: '" + name + "' cannot be a tensor name");
    if (t.numel() * dtype_size(t.dtype) != t.bytes.size())
      throw ShapeError(cifarnet::detail::concat(
          "tensor '", name, "': ", dtype_name(t.dtype), " of shape ", TensorData::shape_string(t.shape),
          " needs ", t.numel() * dtype_size(t.dtype), " bytes, has ", t.bytes.size()));
    tensors_[name] = std::move(t);
  }
  template <class T>
  void set(const std::string& name, std::vector<std::size_t> shape, const std::vector<T>& values) {
    set(name, TensorData::from<T>(std::move(shape), values));
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorData* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  TensorData* find(const std::string& name) {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  /// The tensor `name`, or an Error naming it and the source file.
  const TensorData& at(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      throw Error(cifarnet::detail::concat(source.empty() ? std::string("state dict") : "'" + source + "'",
                                           " has no tensor '", name, "'"));
    return it->second;
  }
  bool erase(const std::string& name) { return tensors_.erase(name) != 0; }
  std::size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  const Map& tensors() const { return tensors_; }
  Map::const_iterator begin() const { return tensors_.begin(); }
  Map::const_iterator end() const { return tensors_.end(); }

 private:
  Map tensors_;
};

}  // namespace cifarnet

// cifarnet/io/safetensors.hpp — reading and writing the safetensors format.
//
// File layout (https://github.com/huggingface/safetensors): 8-byte
// little-endian header length N, N bytes of JSON header
//   {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}
// padded with spaces so N is a multiple of 8, then the tensor bytes
// (little-endian, row-major). Offsets are relative to the end of the header.
//
// Writing reproduces the Python library byte for byte: tensors ordered by
// dtype (largest dtype first, in the library's enum order) then by name, the
// header keys in that same order, "__metadata__" first and only when there is
// metadata. Metadata keys are written sorted (the Python library writes them
// in hash order, so with several keys its bytes are not reproducible anyway).
//
// The in-memory type, StateDict (tensors by name plus string metadata), and
// the element types (Dtype, bf16, f16) live in core/state_dict.hpp; this
// header is the file format only.
//
// Reading validates everything (sizes, JSON, dtypes, shapes against offsets,
// offsets contiguous and in bounds, metadata values are strings, duplicate
// keys) and throws DataError naming the file, the byte offset and the fault.
//
// Checksums: unless disabled, write_safetensors adds metadata entries
// "cifarnet.crc32c/<tensor>" (CRC-32C of each tensor's bytes) and
// "cifarnet.crc32c:header" (CRC-32C of every tensor's name, dtype and shape
// and of the other metadata), 8 lowercase hex digits each. Reading verifies
// them when present, so a flipped bit anywhere is an error, and strips them
// from the returned metadata. Files without them (other writers) load
// unverified unless ReadOptions::require_checksums is set.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cifarnet/core/crc32c.hpp"
#include "cifarnet/core/endian.hpp"
#include "cifarnet/core/error.hpp"
#include "cifarnet/core/state_dict.hpp"
#include "cifarnet/io/file.hpp"

namespace cifarnet::io {

static_assert(
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
    "cifarnet: safetensors I/O copies tensor bytes as they are in memory; it needs a little-endian host");

// The state types under io:: as well: read_safetensors and the checkpoint
// functions take and return them, and code written against io::StateDict
// (examples/, users' programs) keeps compiling.
using cifarnet::bf16;
using cifarnet::Dtype;
using cifarnet::dtype_name;
using cifarnet::dtype_of;
using cifarnet::dtype_size;
using cifarnet::f16;
using cifarnet::StateDict;
using cifarnet::TensorData;

/// Options of write_safetensors / serialize_safetensors.
struct WriteOptions {
  bool checksums = true;  ///< add the cifarnet.crc32c metadata entries
  bool durable = true;    ///< fsync file and directory (write_safetensors only)
  /// write_safetensors only: called with (bytes written so far, file size)
  /// after each piece (length + header, then each tensor) reaches the
  /// temporary file, before the fsync and rename. For progress reports, or to
  /// stretch a write in crash tests (examples/train_demo's
  /// CIFARNET_TEST_SLOW_CHECKPOINT_MS). An exception it throws abandons the write.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

/// Options of read_safetensors / parse_safetensors.
struct ReadOptions {
  bool verify_checksums = true;         ///< verify cifarnet.crc32c entries when present
  bool require_checksums = false;       ///< a file without them is an error
  bool keep_checksum_metadata = false;  ///< leave the entries in StateDict::metadata
};

/// Metadata key prefix of the per-tensor checksums, and the header checksum key.
inline constexpr const char* kCrcTensorPrefix = "cifarnet.crc32c/";
inline constexpr const char* kCrcHeaderKey = "cifarnet.crc32c:header";
/// The Python library's limit on the header length.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

namespace detail {
inline bool is_checksum_key(const std::string& k) {
  return k.rfind(kCrcTensorPrefix, 0) == 0 || k == kCrcHeaderKey;
}
/// `digits` lowercase hex digits of v (the low ones).
using cifarnet::detail::parse_hex;
using cifarnet::detail::to_hex;
inline std::string hex32(std::uint32_t v) { return to_hex(v, 8); }
inline std::optional<std::uint32_t> parse_hex32(const std::string& s) {
  const auto v = parse_hex(s, 8);
  return v ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(*v)) : std::nullopt;
}
/// CRC of tensor names, dtypes, shapes and the non-checksum metadata.
inline std::uint32_t header_crc(const StateDict::Map& tensors, const std::map<std::string, std::string>& md) {
  std::string s;
  for (const auto& [name, t] : tensors) {
    s += name;
    s += '\0';
    s += dtype_name(t.dtype);
    s += '\0';
    for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
    s += '\0';
  }
  for (const auto& [k, v] : md) {
    if (is_checksum_key(k)) continue;
    s += k;
    s += '\0';
    s += v;
    s += '\0';
  }
  return crc32c(s.data(), s.size());
}
inline std::string json_string(const std::string& s, const std::string& what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(cifarnet::detail::concat("safetensors: ", what, " is not valid UTF-8"));
  }
}

/// The tensors in file order (Python's: dtype rank descending, then name).
inline std::vector<StateDict::Map::const_iterator> file_order(const StateDict& dict) {
  std::vector<StateDict::Map::const_iterator> order;
  for (auto it = dict.begin(); it != dict.end(); ++it) order.push_back(it);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a->second.dtype) > static_cast<int>(b->second.dtype);
  });
  return order;
}

/// The padded JSON header (without the 8-byte length).
inline std::string build_header(const StateDict& dict, const WriteOptions& opt,
                                const std::vector<StateDict::Map::const_iterator>& order) {
  std::map<std::string, std::string> md;
  for (const auto& [k, v] : dict.metadata)
    if (!is_checksum_key(k)) md[k] = v;
  if (opt.checksums) {
    for (const auto& [name, t] : dict.tensors())
      md[kCrcTensorPrefix + name] = hex32(crc32c(t.bytes.data(), t.bytes.size()));
    md[kCrcHeaderKey] = hex32(header_crc(dict.tensors(), md));
  }
  std::string h = "{";
  if (!md.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : md) {
      if (!first) h += ',';
      first = false;
      h += json_string(k, "metadata key") + ":" + json_string(v, "metadata value of '" + k + "'");
    }
    h += "}";
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& [name, t] = *order[i];
    if (i || !md.empty()) h += ',';
    h += json_string(name, "tensor name");
    h += ":{\"dtype\":\"";
    h += dtype_name(t.dtype);
    h += "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) h += (d ? "," : "") + std::to_string(t.shape[d]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.bytes.size();
    h += std::to_string(offset) + "]}";
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

/// Random-access bytes: a file (pread) or memory.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  virtual void read(std::uint64_t offset, void* dst, std::size_t n) const = 0;
};
class MemorySource : public ByteSource {
 public:
  MemorySource(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  std::uint64_t size() const override { return n_; }
  void read(std::uint64_t offset, void* dst, std::size_t n) const override {
    if (n) std::memcpy(dst, p_ + offset, n);
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};
class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    fd_ = open_readonly(path);
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw IoError("cannot read '" + path + "': not a regular file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { ::close(fd_); }
  std::uint64_t size() const override { return size_; }
  void read(std::uint64_t offset, void* dst, std::size_t n) const override {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : 0;
        throw IoError(cifarnet::detail::concat("cannot read '", path_, "' at byte offset ", offset, ": ",
                                               r < 0 ? errno_text(err) : "file shrank while reading"));
      }
      p += r;
      n -= static_cast<std::size_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// JSON parse that also rejects duplicate keys (nlohmann keeps the last).
inline nlohmann::json parse_json_strict(const std::string& text, std::string& duplicate) {
  std::vector<std::set<std::string>> keys;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start)
      keys.emplace_back();
    else if (ev == E::object_end && !keys.empty())
      keys.pop_back();
    else if (ev == E::key && !keys.empty() && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  return nlohmann::json::parse(text, cb);
}

inline const char* json_kind(const nlohmann::json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  if (j.is_number_unsigned()) return "a non-negative integer";
  if (j.is_number_integer()) return "a negative integer";
  return "a floating-point number";
}

inline StateDict parse_safetensors(const ByteSource& src, const std::string& file, const ReadOptions& opt) {
  using cifarnet::detail::at_file;
  using cifarnet::detail::concat;
  auto fail = [&](std::uint64_t offset, const std::string& what) -> DataError {
    return DataError(at_file(file, offset, "safetensors: " + what));
  };
  const std::uint64_t fsize = src.size();
  if (fsize < 8) throw fail(0, concat("file is ", fsize, " bytes, too short for the 8-byte header length"));
  std::uint8_t lenbuf[8];
  src.read(0, lenbuf, 8);
  const std::uint64_t n = cifarnet::detail::get_le64(lenbuf);
  if (n > fsize - 8)
    throw fail(0, concat("header length ", n, " exceeds the file size (", fsize, " bytes, so at most ",
                         fsize - 8, "); the file is truncated or not safetensors"));
  if (n > kMaxHeaderBytes)
    throw fail(0, concat("header length ", n, " exceeds the limit of ", kMaxHeaderBytes));
  if (n < 2) throw fail(0, concat("header length ", n, " is too small for a JSON object"));
  std::string text(static_cast<std::size_t>(n), '\0');
  src.read(8, text.data(), text.size());
  if (text[0] != '{') throw fail(8, "header does not start with '{'");
  // nlohmann's lexer stops at a NUL as if the input ended; JSON never contains one.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    throw fail(8 + nul, "header contains a NUL byte, which JSON does not allow");

  nlohmann::json header;
  std::string duplicate;
  try {
    header = parse_json_strict(text, duplicate);
  } catch (const nlohmann::json::parse_error& e) {
    const std::uint64_t pos = e.byte > 0 ? e.byte - 1 : 0;
    throw fail(8 + pos, concat("header is not valid JSON: ", e.what()));
  } catch (const nlohmann::json::exception& e) {
    // e.g. out_of_range 406 for a number beyond double ("1e999"; found by
    // tests/fuzz/fuzz_safetensors.cpp): nlohmann reports it outside parse_error.
    throw fail(8, concat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) throw fail(8, "header is not a JSON object");
  if (!duplicate.empty()) throw fail(8, concat("header has the key '", duplicate, "' twice"));

  StateDict dict;
  dict.source = file;
  struct Entry {
    std::string name;
    std::uint64_t begin, end;
    TensorData tensor;
  };
  std::vector<Entry> entries;
  const std::uint64_t data_start = 8 + n, data_size = fsize - 8 - n;

  for (const auto& [key, val] : header.items()) {
    if (key == "__metadata__") {
      if (!val.is_object()) throw fail(8, concat("__metadata__ is ", json_kind(val), ", expected an object"));
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          throw fail(8, concat("__metadata__ value of '", mk, "' is ", json_kind(mv), ", expected a string"));
        dict.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw fail(8, "empty tensor name");
    const std::string where = "tensor '" + key + "': ";
    if (!val.is_object()) throw fail(8, where + "entry is " + json_kind(val) + ", expected an object");
    for (const auto& [fk, fv] : val.items()) {
      (void)fv;
      if (fk != "dtype" && fk != "shape" && fk != "data_offsets")
        throw fail(8, where + "unexpected key '" + fk + "' (expected dtype, shape, data_offsets)");
    }
    if (!val.contains("dtype") || !val["dtype"].is_string()) throw fail(8, where + "missing string 'dtype'");
    const auto dname = val["dtype"].get<std::string>();
    const auto dtype = parse_dtype(dname);
    if (!dtype) throw fail(8, where + "unknown dtype '" + dname + "'");
    if (!val.contains("shape") || !val["shape"].is_array()) throw fail(8, where + "missing array 'shape'");
    TensorData t;
    t.dtype = *dtype;
    std::uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : val["shape"]) {
      if (!d.is_number_unsigned())
        throw fail(8, where + "shape entry is " + json_kind(d) + ", expected a non-negative integer");
      const auto v = d.get<std::uint64_t>();
      t.shape.push_back(static_cast<std::size_t>(v));
      overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
    }
    const auto& offs = val.contains("data_offsets") ? val["data_offsets"] : nlohmann::json();
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() ||
        !offs[1].is_number_unsigned())
      throw fail(8, where + "'data_offsets' must be two non-negative integers [begin, end]");
    const auto begin = offs[0].get<std::uint64_t>(), end = offs[1].get<std::uint64_t>();
    if (begin > end)
      throw fail(8, concat(where, "data_offsets [", begin, ", ", end, "] end before they begin"));
    std::uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, std::uint64_t(dtype_size(*dtype)), &nbytes);
    if (overflow || nbytes != end - begin)
      throw fail(8, concat(where, dname, " shape ", TensorData::shape_string(t.shape), " needs ",
                           overflow ? std::string("more than 2^64") : std::to_string(nbytes),
                           " bytes but data_offsets [", begin, ", ", end, "] span ", end - begin));
    if (end > data_size)
      throw fail(data_start + begin, concat(where, "data_offsets [", begin, ", ", end,
                                            "] extend past the end of the data (", data_size, " bytes)"));
    entries.push_back({key, begin, end, std::move(t)});
  }

  // Offsets must tile [0, data_size) exactly, in some order.
  std::vector<const Entry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < pos)
      throw fail(data_start + e->begin,
                 concat("tensor '", e->name, "' data_offsets [", e->begin, ", ", e->end, "] overlap tensor '",
                        prev->name, "' [", prev->begin, ", ", prev->end, "]"));
    if (e->begin > pos)
      throw fail(data_start + pos,
                 concat("gap of ", e->begin - pos, " bytes before tensor '", e->name,
                        "' (data_offsets begin at ", e->begin, ", previous data ends at ", pos, ")"));
    pos = e->end;
    prev = e;
  }
  if (pos != data_size)
    throw fail(data_start + pos,
               concat(data_size - pos, " bytes after the last tensor's data (data section is ", data_size,
                      " bytes, tensors cover ", pos, ")"));

  for (auto& e : entries) {
    e.tensor.bytes.resize(static_cast<std::size_t>(e.end - e.begin));
    src.read(data_start + e.begin, e.tensor.bytes.data(), e.tensor.bytes.size());
    dict.set(e.name, std::move(e.tensor));
  }

  // Checksums.
  bool any = false;
  for (const auto& [k, v] : dict.metadata) any = any || is_checksum_key(k);
  if (!any && opt.require_checksums) throw fail(8, "file has no cifarnet.crc32c checksums");
  if (any && opt.verify_checksums) {
    for (const auto& [k, v] : dict.metadata) {
      if (!is_checksum_key(k)) continue;
      if (!parse_hex32(v)) throw fail(8, concat("checksum entry '", k, "' has malformed value '", v, "'"));
      if (k != kCrcHeaderKey && !dict.contains(k.substr(std::strlen(kCrcTensorPrefix))))
        throw fail(8, concat("checksum entry '", k, "' names no tensor in the file"));
    }
    auto hc = dict.metadata.find(kCrcHeaderKey);
    if (hc == dict.metadata.end()) throw fail(8, concat("checksum entry '", kCrcHeaderKey, "' is missing"));
    const std::uint32_t header_got = header_crc(dict.tensors(), dict.metadata);
    if (*parse_hex32(hc->second) != header_got)
      throw fail(8, concat("header checksum mismatch (stored ", hc->second, ", computed ", hex32(header_got),
                           "): tensor names, dtypes, shapes or metadata are corrupt"));
    for (const auto& e : entries) {
      auto it = dict.metadata.find(kCrcTensorPrefix + e.name);
      if (it == dict.metadata.end()) throw fail(8, concat("tensor '", e.name, "' has no checksum entry"));
      const auto& b = dict.at(e.name).bytes;
      const std::uint32_t got = crc32c(b.data(), b.size());
      if (*parse_hex32(it->second) != got)
        throw fail(data_start + e.begin,
                   concat("CRC-32C mismatch in tensor '", e.name, "' (stored ", it->second, ", computed ",
                          hex32(got), "): its data is corrupt"));
    }
  }
  if (!opt.keep_checksum_metadata)
    for (auto it = dict.metadata.begin(); it != dict.metadata.end();)
      it = is_checksum_key(it->first) ? dict.metadata.erase(it) : std::next(it);
  return dict;
}
}  // namespace detail

/// The file's bytes in memory (see the layout above).
inline std::vector<std::uint8_t> serialize_safetensors(const StateDict& dict, const WriteOptions& opt = {}) {
  const auto order = detail::file_order(dict);
  const std::string header = detail::build_header(dict, opt, order);
  std::size_t total = 8 + header.size();
  for (const auto& it : order) total += it->second.bytes.size();
  std::vector<std::uint8_t> out(total);
  cifarnet::detail::put_le64(out.data(), header.size());
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::size_t pos = 8 + header.size();
  for (const auto& it : order) {
    const auto& b = it->second.bytes;
    if (!b.empty()) std::memcpy(out.data() + pos, b.data(), b.size());
    pos += b.size();
  }
  return out;
}

/// Writes `dict` to `path` atomically (temporary file, fsync, rename, fsync
/// of the directory); on failure the old file is untouched and IoError names
/// the file.
inline void write_safetensors(const std::string& path, const StateDict& dict, const WriteOptions& opt = {}) {
  const auto order = detail::file_order(dict);
  const std::string header = detail::build_header(dict, opt, order);
  std::uint64_t total = 8 + header.size();
  for (const auto& it : order) total += it->second.bytes.size();
  AtomicFileWriter w(path, opt.durable);
  std::uint8_t len[8];
  cifarnet::detail::put_le64(len, header.size());
  w.write(len, 8);
  w.write(header);
  if (opt.progress) opt.progress(w.bytes_written(), total);
  for (const auto& it : order) {
    w.write(it->second.bytes.data(), it->second.bytes.size());
    if (opt.progress) opt.progress(w.bytes_written(), total);
  }
  w.commit();
}

/// Parses safetensors bytes; `name` is used in error messages.
inline StateDict parse_safetensors(const std::uint8_t* data, std::size_t size, const std::string& name,
                                   const ReadOptions& opt = {}) {
  return detail::parse_safetensors(detail::MemorySource(data, size), name, opt);
}

/// Reads and validates a safetensors file (IoError when it cannot be read,
/// DataError naming the file and byte offset when its content is wrong).
inline StateDict read_safetensors(const std::string& path, const ReadOptions& opt = {}) {
  return detail::parse_safetensors(detail::FileSource(path), path, opt);
}

}  // namespace cifarnet::io

// cifarnet/io/matconvnet.hpp — MatConvNet model files (.mat) through
// matio (Debian libmatio-dev; link with `pkg-config matio`): the reader of
// imagenet-vgg-verydeep-19.mat for the style transfer (TF_SEMANTICS.md §6), and a writer
// of files with the same structure (tests, demos with random weights).
//
// Structure (MatConvNet "SimpleNN"): a variable `layers`, a 1xL cell array;
// cell i holds a struct with fields `name` (char), `type` (char: 'conv',
// 'relu', 'pool', ...) and, for convolutions, `weights`, a 1x2 cell
// {filters H x W x Cin x Cout, biases with Cout values} in single (or double)
// precision. MATLAB stores arrays column-major; the reader returns filters
// row-major HWIO, the layout of cifarnet's Conv2d and of tf.nn.conv2d (a
// trailing Cout = 1 dropped by MATLAB is restored). MATLAB v5 (compressed or
// not, which is what the real file is) and v7.3 (HDF5) files both work, as
// matio reads them.
//
// Errors: a file that cannot be opened is an IoError; a file that is not a
// .mat file matio can read, is truncated, lacks `layers`, a layer or a field,
// or holds a layer under another name or with a malformed field is a
// DataError naming the file, the layer (0-based index and name) and the
// field. matio's own log messages are captured and appended to the error
// instead of printed: cifarnet's handler, which keeps the last messages of
// the calling thread, is installed only while a read or write runs
// (MatioLogScope) and the previous one is put back after it. matio cannot
// tell which handler is installed, so "previous" is matio's default or the
// one given to set_matio_log_handler (a program with a handler of its own
// installs it there to keep it across cifarnet's reads).
// Memory: matio reads the whole `layers` variable, FC layers included
// (about 575 MB for the real file), for as long as a read lasts.
#pragma once

#include <matio.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/core/rng.hpp"
#include "cifarnet/models/vgg19.hpp"

namespace cifarnet::io {

/// File format written by write_matconvnet.
enum class MatVersion {
  V5,   ///< MATLAB v5/v7 (what imagenet-vgg-verydeep-19.mat is)
  V73,  ///< MATLAB v7.3 (HDF5)
};

/// One layer to write (write_matconvnet). Filters are given row-major HWIO.
struct MatLayerSpec {
  std::string name, type;
  bool has_weights = false;               ///< write a `weights` field
  std::vector<std::size_t> filter_shape;  ///< H, W, Cin, Cout (any rank; written as given)
  std::vector<float> filters;             ///< row-major over filter_shape
  std::vector<std::size_t> bias_shape;    ///< e.g. {1, Cout} or {Cout, 1}
  std::vector<float> biases;
  bool has_name = true, has_type = true;  ///< tests drop fields with these
};

/// What the reader found at one index of `layers` (list_matconvnet).
struct MatLayerInfo {
  int index = 0;
  std::string name, type;
  std::vector<std::size_t> filter_shape, bias_shape;  ///< empty when there are no weights
};

namespace detail {

/// The calling thread's recent matio log messages.
inline std::string& matio_log() {
  thread_local std::string log;
  return log;
}
inline void matio_log_handler(int level, char* message) {
  std::string& log = matio_log();
  if (log.size() > 4000) log.erase(0, log.size() - 2000);
  const char* what = level <= 2 ? "error" : level <= 4 ? "warning" : "note";
  std::string m;  // HDF5's multi-line traces on one line
  for (const char* p = message ? message : ""; *p; ++p) {
    const char c = (*p == '\n' || *p == '\t') ? ' ' : *p;
    if (c != ' ' || (!m.empty() && m.back() != ' ')) m += c;
  }
  log += cifarnet::detail::concat(log.empty() ? "" : "; ", "matio ", what, ": ", m);
}
/// The handler that is put back when no cifarnet read or write runs:
/// matio's default (nullptr) or the one given to set_matio_log_handler.
struct MatioRestore {
  std::mutex mutex;
  int active = 0;  ///< MatioLogScopes alive
  std::string program;
  void (*handler)(int, char*) = nullptr;

  void install_outer() const {
    if (handler)
      Mat_LogInitFunc(program.c_str(), handler);
    else
      Mat_LogInit(program.empty() ? nullptr : program.c_str());
  }
};
inline MatioRestore& matio_restore() {
  static MatioRestore r;
  return r;
}

}  // namespace detail

/// Sets matio's log handler for the rest of the program (nullptr: matio's
/// default, which prints), and makes it the one MatioLogScope puts back.
inline void set_matio_log_handler(const std::string& program, void (*handler)(int level, char* message)) {
  auto& r = detail::matio_restore();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.program = program;
  r.handler = handler;
  if (r.active == 0) r.install_outer();
}

/// While alive, matio's messages go to the calling thread's matio_log()
/// (cleared on entry) instead of the program's handler; the outermost scope
/// puts that handler back when it ends, exception or not.
class MatioLogScope {
 public:
  MatioLogScope() {
    auto& r = detail::matio_restore();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.active++ == 0) Mat_LogInitFunc("cifarnet", &detail::matio_log_handler);
    detail::matio_log().clear();
  }
  ~MatioLogScope() {
    auto& r = detail::matio_restore();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (--r.active == 0) r.install_outer();
  }
  MatioLogScope(const MatioLogScope&) = delete;
  MatioLogScope& operator=(const MatioLogScope&) = delete;
};

namespace detail {
inline std::string matio_reason() {
  const std::string& log = matio_log();
  return log.empty() ? std::string() : " [" + log + "]";
}

struct MatCloser {
  void operator()(mat_t* m) const { Mat_Close(m); }
};
struct VarFree {
  void operator()(matvar_t* v) const { Mat_VarFree(v); }
};

inline const char* class_name(int c) {
  switch (c) {
    case MAT_C_CELL:
      return "cell";
    case MAT_C_STRUCT:
      return "struct";
    case MAT_C_CHAR:
      return "char";
    case MAT_C_DOUBLE:
      return "double";
    case MAT_C_SINGLE:
      return "single";
    case MAT_C_INT8:
      return "int8";
    case MAT_C_UINT8:
      return "uint8";
    case MAT_C_INT16:
      return "int16";
    case MAT_C_UINT16:
      return "uint16";
    case MAT_C_INT32:
      return "int32";
    case MAT_C_UINT32:
      return "uint32";
    case MAT_C_INT64:
      return "int64";
    case MAT_C_UINT64:
      return "uint64";
    case MAT_C_SPARSE:
      return "sparse";
    case MAT_C_FUNCTION:
      return "function";
    case MAT_C_OBJECT:
      return "object";
    default:
      return "empty";
  }
}
inline std::vector<std::size_t> dims_of(const matvar_t* v) {
  std::vector<std::size_t> d;
  for (int i = 0; i < v->rank; ++i) d.push_back(v->dims[i]);
  return d;
}
/// Element count from the dims (SIZE_MAX when their product overflows: a
/// corrupt header, never backed by that much data).
inline std::size_t numel(const matvar_t* v) {
  std::size_t n = 1;
  for (int i = 0; i < v->rank; ++i)
    if (__builtin_mul_overflow(n, v->dims[i], &n)) return SIZE_MAX;
  return v->rank > 0 ? n : 0;
}
inline std::string dims_str(const std::vector<std::size_t>& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s.empty() ? "[]" : s;
}

/// Checks the nesting of an uncompressed MATLAB v5 miMATRIX element before
/// matio reads it: every sub-element lies within its parent, and the element
/// counts matio allocates from the dimensions (pointers for cell and struct
/// arrays, values for numeric and char arrays) are backed by the element's
/// bytes. matio trusts the dimensions: a 1.5 kB file claiming a 1x2^29 cell
/// made it allocate 4 GiB (found by tests/fuzz/fuzz_matconvnet.cpp).
/// Compressed (miCOMPRESSED) variables are inflated by matio itself and are
/// not checked here.
class V5MatrixCheck {
 public:
  V5MatrixCheck(std::FILE* f, bool le, const std::string& path) : f_(f), le_(le), path_(path) {}

  /// The miMATRIX payload [begin, end) of the element whose tag is at `at`.
  void matrix(std::uint64_t at, std::uint64_t begin, std::uint64_t end, int depth) {
    if (depth > 32) fail(at, "miMATRIX elements nested more than 32 deep");
    struct Sub {
      std::uint32_t type, nbytes;
      std::uint64_t data;
    };
    std::vector<Sub> subs;
    std::size_t matrices = 0;
    for (std::uint64_t q = begin; q < end;) {
      if (end - q < 8) fail(q, "a data element tag is cut short inside its miMATRIX");
      unsigned char tag[8];
      read(q, tag, 8);
      const std::uint32_t type = u32(tag), nbytes = u32(tag + 4);
      if (type >> 16) {  // small element: type in the low half, size in the high half, data in the tag
        subs.push_back({type & 0xFFFF, type >> 16, q + 4});
        q += 8;
        continue;
      }
      if (nbytes > end - q - 8)
        fail(q, cifarnet::detail::concat("a data element of ", nbytes,
                                         " bytes runs past the end of its miMATRIX"));
      if (type == 15) fail(q, "a compressed element nested inside a miMATRIX");
      if (type == 14) {
        matrix(q, q + 8, q + 8 + nbytes, depth + 1);
        ++matrices;
      }
      subs.push_back({type, nbytes, q + 8});
      q = std::min<std::uint64_t>(end, (q + 8 + nbytes + 7) / 8 * 8);
    }
    if (subs.size() < 3) return;  // an empty matrix (e.g. an empty cell), or matio's to reject
    unsigned char w[4];
    if (subs[0].nbytes < 4) return;
    read(subs[0].data, w, 4);
    const std::uint32_t cls = u32(w) & 0xFF;
    if (subs[1].type != 5 || subs[1].nbytes % 4 != 0 || subs[1].nbytes > 4 * 64) return;  // matio rejects
    std::uint64_t count = 1;
    for (std::uint32_t k = 0; k < subs[1].nbytes / 4; ++k) {
      read(subs[1].data + 4 * k, w, 4);
      if (__builtin_mul_overflow(count, std::uint64_t(u32(w)), &count)) count = UINT64_MAX;
    }
    if (count == 0) return;
    std::uint64_t backed = 0;  // elements the content can hold at most
    if (cls == 1) {            // cell: one miMATRIX per element
      backed = matrices;
    } else if (cls == 2 && subs.size() >= 5 && subs[3].nbytes >= 4) {  // struct: nfields miMATRIX each
      read(subs[3].data, w, 4);
      const std::uint32_t len = u32(w);
      const std::uint64_t nfields = len ? subs[4].nbytes / len : 0;
      backed = nfields ? matrices / nfields : UINT64_MAX;
    } else if (cls == 4 || (cls >= 6 && cls <= 15)) {  // char, numeric: at least a byte per value
      backed = subs.size() > 3 ? subs[3].nbytes : 0;
    } else {
      return;  // sparse, object, function: left to matio
    }
    if (count > backed)
      fail(at, cifarnet::detail::concat("an array's dimensions claim ", count, " elements but its ",
                                        end - begin, " bytes hold at most ", backed));
  }

 private:
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const {
    throw DataError(cifarnet::detail::at_file(path_, at, what + " (corrupt .mat file)"));
  }
  void read(std::uint64_t at, unsigned char* dst, std::size_t n) const {
    if (std::fseek(f_, long(at), SEEK_SET) != 0 || std::fread(dst, 1, n, f_) != n)
      fail(at, "cannot read a data element");
  }
  std::uint32_t u32(const unsigned char* p) const {
    return le_ ? std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
                     std::uint32_t(p[3]) << 24
               : std::uint32_t(p[3]) | std::uint32_t(p[2]) << 8 | std::uint32_t(p[1]) << 16 |
                     std::uint32_t(p[0]) << 24;
  }
  std::FILE* f_;
  bool le_;
  const std::string& path_;
};

/// Checks that every top-level data element of a MATLAB v5 file (a variable,
/// usually miCOMPRESSED) lies within the file: zlib streams cut short can
/// otherwise decode "successfully" into fewer layers. v7.3 (HDF5) files are
/// left to HDF5, which checks its own end-of-file address.
inline void check_v5_extent(const std::string& path, std::uint64_t size) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return;  // Mat_Open reports it
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, &std::fclose);
  unsigned char head[128];
  if (size < 128 || std::fread(head, 1, 128, f) != 128) return;  // not v5: Mat_Open decides
  const bool le = head[126] == 'I' && head[127] == 'M', be = head[126] == 'M' && head[127] == 'I';
  if (!le && !be) return;
  auto u32 = [&](const unsigned char* p) {
    return le ? std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
                    std::uint32_t(p[3]) << 24
              : std::uint32_t(p[3]) | std::uint32_t(p[2]) << 8 | std::uint32_t(p[1]) << 16 |
                    std::uint32_t(p[0]) << 24;
  };
  const std::uint32_t version = le ? std::uint32_t(head[124]) | std::uint32_t(head[125]) << 8
                                   : std::uint32_t(head[125]) | std::uint32_t(head[124]) << 8;
  if (version != 0x0100) return;  // v7.3 carries 0x0200
  std::uint64_t off = 128;
  while (off < size) {
    unsigned char tag[8];
    if (size - off < 8 || std::fseek(f, long(off), SEEK_SET) != 0 || std::fread(tag, 1, 8, f) != 8)
      throw DataError(
          cifarnet::detail::at_file(path, off,
                                    cifarnet::detail::concat("a data element tag is cut short (file size ",
                                                             size, " bytes): truncated file")));
    const std::uint32_t type = u32(tag), nbytes = u32(tag + 4);
    if (type >> 16) {  // small data element: 4 bytes of data inside the tag
      off += 8;
      continue;
    }
    std::uint64_t next = off + 8 + nbytes;
    if (type != 15) next = (next + 7) / 8 * 8;  // uncompressed elements are 8-byte aligned
    if (off + 8 + nbytes > size)
      throw DataError(cifarnet::detail::at_file(
          path, off,
          cifarnet::detail::concat("a variable of ", nbytes, " bytes runs past the end of the file (", size,
                                   " bytes): truncated file")));
    if (type == 14) V5MatrixCheck(f, le, path).matrix(off, off + 8, off + 8 + nbytes, 0);
    off = next;
  }
}

/// Cell i of a cell array, or nullptr. matio's Mat_VarGetCell reads the
/// cell's data without checking it: a corrupt file can leave it missing.
inline matvar_t* cell_at(const matvar_t* v, std::size_t i) {
  if (!v || v->class_type != MAT_C_CELL || !v->data || i >= numel(v) || i >= v->nbytes / sizeof(matvar_t*) ||
      i > std::size_t(INT32_MAX))
    return nullptr;
  return Mat_VarGetCell(const_cast<matvar_t*>(v), int(i));
}

/// An opened .mat file with its `layers` variable read.
class MatLayers {
 public:
  explicit MatLayers(const std::string& path) : path_(path) {
    struct stat st {};
    const int rc = ::stat(path.c_str(), &st), err = errno;
    if (rc != 0 || !S_ISREG(st.st_mode))
      throw IoError(cifarnet::detail::concat("cannot open '", path,
                                             "': ", rc != 0 ? std::strerror(err) : "not a regular file"));
    if (st.st_size < 128)
      throw DataError(cifarnet::detail::concat("'", path, "' is ", st.st_size,
                                               " bytes, too short for a MATLAB .mat file (128-byte header)"));
    check_v5_extent(path, std::uint64_t(st.st_size));
    mat_.reset(Mat_Open(path.c_str(), MAT_ACC_RDONLY));
    if (!mat_)
      throw DataError(cifarnet::detail::concat(
          "'", path, "' (", st.st_size, " bytes) is not a MATLAB .mat file matio can read (v5 or v7.3)",
          matio_reason()));
    // The variables present, to tell "no `layers`" from "unreadable `layers`".
    std::vector<std::string> names;
    bool has_layers = false;
    {
      std::unique_ptr<matvar_t, VarFree> v;
      Mat_Rewind(mat_.get());
      while ((v = std::unique_ptr<matvar_t, VarFree>(Mat_VarReadNextInfo(mat_.get())))) {
        if (v->name) names.emplace_back(v->name);
        if (v->name && std::strcmp(v->name, "layers") == 0) has_layers = true;
        if (names.size() > 1000) break;
      }
      Mat_Rewind(mat_.get());
    }
    if (names.empty() && !matio_log().empty())
      throw DataError(cifarnet::detail::concat(
          "'", path, "': cannot read its variables (truncated or corrupt file)", matio_reason()));
    if (!has_layers) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw DataError(cifarnet::detail::concat(
          "'", path, "' has no variable 'layers' (",
          names.empty() ? "no readable variable" : "variables: " + list,
          "); a MatConvNet SimpleNN model such as imagenet-vgg-verydeep-19.mat has one", matio_reason()));
    }
    layers_.reset(Mat_VarRead(mat_.get(), "layers"));
    if (!layers_)
      throw DataError(cifarnet::detail::concat(
          "'", path, "': cannot read variable 'layers' (truncated or corrupt file)", matio_reason()));
    if (layers_->class_type == MAT_C_STRUCT)
      throw DataError(cifarnet::detail::concat(
          "'", path,
          "': 'layers' is a struct array (MatConvNet's DagNN format); expected the SimpleNN cell array of "
          "imagenet-vgg-verydeep-19.mat"));
    if (layers_->class_type != MAT_C_CELL)
      throw DataError(cifarnet::detail::concat("'", path, "': 'layers' is a ",
                                               class_name(layers_->class_type),
                                               " array, expected a cell array of layer structs"));
  }

  const std::string& path() const { return path_; }
  std::size_t size() const { return numel(layers_.get()); }

  /// The struct at 0-based index i (DataError when absent or not a struct).
  matvar_t* layer(std::size_t i, const std::string& expected) const {
    if (i >= size())
      throw DataError(cifarnet::detail::concat("'", path_, "': 'layers' has ", size(), " entries; layer ",
                                               expected.empty() ? "" : "'" + expected + "' ", "at index ", i,
                                               " (0-based) is missing"));
    matvar_t* c = cell_at(layers_.get(), i);
    if (!c || c->class_type != MAT_C_STRUCT || numel(c) < 1)
      throw DataError(cifarnet::detail::concat("'", path_, "': layers{", i + 1, "} (0-based index ", i,
                                               ") is ", c ? class_name(c->class_type) : "missing",
                                               ", expected a layer struct"));
    return c;
  }

  /// Field `field` of layer i, or nullptr when absent.
  static matvar_t* field(matvar_t* layer, const char* name) {
    // Checked here, not by matio: a struct read from a corrupt file can lack
    // its field data or a field name (matio then dereferences null; found by
    // tests/fuzz/fuzz_matconvnet.cpp).
    if (!layer || layer->class_type != MAT_C_STRUCT || !layer->data) return nullptr;
    const unsigned nfields = Mat_VarGetNumberOfFields(layer);
    char* const* names = Mat_VarGetStructFieldnames(layer);
    if (!names || nfields == 0 || layer->nbytes / sizeof(matvar_t*) < nfields) return nullptr;
    for (unsigned k = 0; k < nfields; ++k)
      if (names[k] && std::strcmp(names[k], name) == 0) return static_cast<matvar_t**>(layer->data)[k];
    return nullptr;
  }

  /// A char field as a string ("" when absent); DataError when not char.
  std::string text(matvar_t* layer, const char* name, std::size_t i) const {
    matvar_t* f = field(layer, name);
    if (!f) return "";
    if (f->class_type != MAT_C_CHAR)
      throw DataError(cifarnet::detail::concat("'", path_, "': layer at index ", i, ": field '", name,
                                               "' is ", class_name(f->class_type), ", expected char"));
    const std::size_t n = numel(f);
    if (n == 0 || !f->data) return "";
    // The dims come from the file; the data is what matio actually read.
    if (f->data_size != 0 && n > f->nbytes / f->data_size)
      throw DataError(cifarnet::detail::concat("'", path_, "': layer at index ", i, ": field '", name,
                                               "' has ", n, " characters but holds ", f->nbytes,
                                               " bytes (truncated or corrupt file)"));
    std::string s;
    if (f->data_size == 1) {
      const char* p = static_cast<const char*>(f->data);
      s.assign(p, p + n);
    } else if (f->data_size == 2) {
      const std::uint16_t* p = static_cast<const std::uint16_t*>(f->data);
      for (std::size_t k = 0; k < n; ++k) s += p[k] < 128 ? char(p[k]) : '?';
    } else {
      throw DataError(cifarnet::detail::concat("'", path_, "': layer at index ", i, ": field '", name,
                                               "' has characters of ", f->data_size, " bytes"));
    }
    return s;
  }

 private:
  std::string path_;
  MatioLogScope matio_messages_;  // first in, last out: covers every matio call on the file
  std::unique_ptr<mat_t, MatCloser> mat_;
  std::unique_ptr<matvar_t, VarFree> layers_;
};

/// For each element of an array of shape `dims` in row-major order, its
/// index in MATLAB's column-major order.
inline std::vector<std::size_t> column_major_index(const std::vector<std::size_t>& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<std::size_t> out(n), idx(dims.size(), 0);
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t at = 0, stride = 1;
    for (std::size_t a = 0; a < dims.size(); ++a) {
      at += idx[a] * stride;
      stride *= dims[a];
    }
    out[k] = at;
    for (std::size_t a = dims.size(); a-- > 0;) {  // next row-major index
      if (++idx[a] < dims[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

/// Column-major numeric array to row-major floats.
inline std::vector<float> row_major(const matvar_t* v, const std::vector<std::size_t>& dims,
                                    const std::string& where) {
  const std::size_t n = numel(v);
  if (v->isComplex) throw DataError(where + " is complex, expected real single or double values");
  if (n > 0 && !v->data) throw DataError(where + " has no data (truncated file?)");
  if (v->class_type != MAT_C_SINGLE && v->class_type != MAT_C_DOUBLE)
    throw DataError(
        cifarnet::detail::concat(where, " is ", class_name(v->class_type), ", expected single or double"));
  if (n > 0 && n > v->nbytes / (v->class_type == MAT_C_SINGLE ? 4 : 8))
    throw DataError(cifarnet::detail::concat(where, " holds ", v->nbytes, " bytes for ", n, " values"));
  std::vector<float> out(n);
  const std::vector<std::size_t> src = column_major_index(dims);
  for (std::size_t k = 0; k < n; ++k)
    out[k] = v->class_type == MAT_C_SINGLE ? static_cast<const float*>(v->data)[src[k]]
                                           : float(static_cast<const double*>(v->data)[src[k]]);
  return out;
}

/// Reads layer i's weights into `out` (name already checked).
inline void read_conv(const MatLayers& f, std::size_t i, matvar_t* layer, ConvWeights& out) {
  const std::string where =
      cifarnet::detail::concat("'", f.path(), "': layer '", out.name, "' (0-based index ", i, ")");
  matvar_t* w = MatLayers::field(layer, "weights");
  if (!w) throw DataError(where + " has no field 'weights'");
  if (w->class_type != MAT_C_CELL || numel(w) < 2)
    throw DataError(cifarnet::detail::concat(where, ": field 'weights' is a ", dims_str(dims_of(w)), " ",
                                             class_name(w->class_type),
                                             ", expected a 1x2 cell {filters, biases}"));
  matvar_t* fw = cell_at(w, 0);
  matvar_t* fb = cell_at(w, 1);
  if (!fw || !fb) throw DataError(where + ": field 'weights' has an unreadable cell (truncated file?)");
  std::vector<std::size_t> d = dims_of(fw);
  while (d.size() < 4) d.push_back(1);  // MATLAB drops trailing singleton dimensions
  if (d.size() > 4 || numel(fw) == 0)
    throw DataError(cifarnet::detail::concat(where, ": weights{1} is ", dims_str(dims_of(fw)),
                                             ", expected H x W x Cin x Cout filters"));
  out.shape = {d[0], d[1], d[2], d[3]};
  out.weights = row_major(fw, d, where + ": weights{1}");
  const std::vector<std::size_t> bd = dims_of(fb);
  const std::size_t nb = numel(fb);
  const bool vector = std::count_if(bd.begin(), bd.end(), [](std::size_t x) { return x != 1; }) <= 1;
  if (nb != d[3] || !vector)
    throw DataError(cifarnet::detail::concat(where, ": weights{2} (biases) is ", dims_str(bd), ", expected ",
                                             d[3], " values (one per output channel of the ",
                                             dims_str(dims_of(fw)), " filters)"));
  out.bias = row_major(fb, {nb}, where + ": weights{2}");
}

inline std::vector<Vgg19Conv> select_convs(const std::vector<std::string>& names) {
  std::vector<Vgg19Conv> out;
  for (const auto& n : names) {
    const auto& all = vgg19_convs();
    auto it = std::find_if(all.begin(), all.end(), [&](const Vgg19Conv& c) { return n == c.name; });
    if (it == all.end())
      throw ConfigError("read_vgg19_mat: '" + n + "' is not a VGG-19 conv layer (conv1_1 ... conv5_4)");
    out.push_back(*it);
  }
  return out;
}

}  // namespace detail

/// Reads the named VGG-19 conv layers (default: all 16) from a MatConvNet
/// .mat file, checking that each sits at its index of TF_SEMANTICS.md §6 under its
/// name. Filters come back row-major HWIO.
inline std::vector<ConvWeights> read_vgg19_mat(const std::string& path,
                                               std::vector<std::string> layers = {}) {
  if (layers.empty())
    for (const auto& c : vgg19_convs()) layers.emplace_back(c.name);
  const std::vector<Vgg19Conv> wanted = detail::select_convs(layers);
  detail::MatLayers f(path);
  std::vector<ConvWeights> out;
  for (const auto& c : wanted) {
    const std::size_t i = std::size_t(c.mat_index);
    matvar_t* layer = f.layer(i, c.name);
    if (!detail::MatLayers::field(layer, "name"))
      throw DataError(cifarnet::detail::concat("'", path, "': layer at index ", i, " (expected '", c.name,
                                               "') has no field 'name'"));
    const std::string name = f.text(layer, "name", i);
    if (name != c.name)
      throw DataError(cifarnet::detail::concat("'", path, "': layer at index ", i, " is named '", name,
                                               "', expected '", c.name,
                                               "' (VGG-19's layer order in imagenet-vgg-verydeep-19.mat)"));
    ConvWeights w;
    w.name = c.name;
    w.index = c.mat_index;
    detail::read_conv(f, i, layer, w);
    out.push_back(std::move(w));
  }
  return out;
}

/// Every entry of `layers`: index, name, type and weight shapes (for
/// inspection; nothing is checked against VGG-19).
inline std::vector<MatLayerInfo> list_matconvnet(const std::string& path) {
  detail::MatLayers f(path);
  std::vector<MatLayerInfo> out;
  for (std::size_t i = 0; i < f.size(); ++i) {
    matvar_t* layer = f.layer(i, "");
    MatLayerInfo info;
    info.index = int(i);
    info.name = f.text(layer, "name", i);
    info.type = f.text(layer, "type", i);
    matvar_t* w = detail::MatLayers::field(layer, "weights");
    if (w && w->class_type == MAT_C_CELL && detail::numel(w) >= 2) {
      if (matvar_t* a = detail::cell_at(w, 0)) info.filter_shape = detail::dims_of(a);
      if (matvar_t* b = detail::cell_at(w, 1)) info.bias_shape = detail::dims_of(b);
    }
    out.push_back(std::move(info));
  }
  return out;
}

/// Loads a VGG model's conv weights (the layers the network has) from a
/// MatConvNet .mat file: read_vgg19_mat + load_vgg19_weights.
template <class M>
void load_vgg19_mat(M& model, const std::string& path) {
  std::vector<std::string> names;
  for (const auto& c : vgg19_convs())
    if (model.parameters().find(std::string(c.name) + "/weights")) names.emplace_back(c.name);
  load_vgg19_weights(model.parameters(), read_vgg19_mat(path, names), path);
}

/// Writes a MatConvNet SimpleNN file (`layers` cell array of structs with
/// name, type and, for layers with weights, weights = {filters, biases}),
/// v5 (zlib-compressed) or v7.3. IoError when matio cannot create the file.
inline void write_matconvnet(const std::string& path, const std::vector<MatLayerSpec>& layers,
                             MatVersion version = MatVersion::V5) {
  using detail::VarFree;
  MatioLogScope matio_messages;
  auto fail = [&](const std::string& what) {
    throw IoError(cifarnet::detail::concat("write_matconvnet: '", path, "': ", what, detail::matio_reason()));
  };
  // Characters as 16-bit code units, MATLAB's own char type (matio 1.5.23
  // writes 8-bit char data into compressed v5 files with a layout its own
  // reader then misreads).
  auto text = [](const std::string& s) {
    std::vector<std::uint16_t> u(s.begin(), s.end());
    std::size_t d[2] = {1, s.size()};
    if (s.empty()) d[0] = 0;
    return Mat_VarCreate(nullptr, MAT_C_CHAR, MAT_T_UINT16, 2, d, u.data(), 0);
  };
  auto numeric = [](const std::vector<std::size_t>& shape, const std::vector<float>& rm) {
    // Row-major to MATLAB's column-major order.
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    if (rm.size() != n) throw ConfigError("write_matconvnet: an array's values do not match its shape");
    std::vector<float> cm(n);
    const std::vector<std::size_t> dst = detail::column_major_index(shape);
    for (std::size_t k = 0; k < n; ++k) cm[dst[k]] = rm[k];
    std::vector<std::size_t> dims = shape;
    if (dims.size() < 2) dims.resize(2, 1);
    return Mat_VarCreate(nullptr, MAT_C_SINGLE, MAT_T_SINGLE, int(dims.size()), dims.data(), cm.data(), 0);
  };
  std::size_t top[2] = {1, layers.size()};
  std::unique_ptr<matvar_t, VarFree> cell(
      Mat_VarCreate("layers", MAT_C_CELL, MAT_T_CELL, 2, top, nullptr, 0));
  if (!cell) fail("cannot create the 'layers' cell array");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const MatLayerSpec& l = layers[i];
    std::vector<const char*> fields;
    if (l.has_name) fields.push_back("name");
    if (l.has_type) fields.push_back("type");
    if (l.has_weights) fields.push_back("weights");
    fields.push_back(nullptr);
    std::size_t one[2] = {1, 1};
    matvar_t* s = Mat_VarCreateStruct2(nullptr, 2, one, fields.data());
    if (!s) fail("cannot create a layer struct");
    Mat_VarSetCell(cell.get(), int(i), s);  // the cell owns it from here
    if (l.has_name) Mat_VarSetStructFieldByName(s, "name", 0, text(l.name));
    if (l.has_type) Mat_VarSetStructFieldByName(s, "type", 0, text(l.type));
    if (l.has_weights) {
      std::size_t two[2] = {1, 2};
      matvar_t* w = Mat_VarCreate(nullptr, MAT_C_CELL, MAT_T_CELL, 2, two, nullptr, 0);
      if (!w) fail("cannot create a weights cell");
      Mat_VarSetStructFieldByName(s, "weights", 0, w);
      Mat_VarSetCell(w, 0, numeric(l.filter_shape, l.filters));
      Mat_VarSetCell(w, 1, numeric(l.bias_shape, l.biases));
    }
  }
  std::unique_ptr<mat_t, detail::MatCloser> mat(
      Mat_CreateVer(path.c_str(), nullptr, version == MatVersion::V5 ? MAT_FT_MAT5 : MAT_FT_MAT73));
  if (!mat) fail("matio cannot create the file");
  if (Mat_VarWrite(mat.get(), cell.get(),
                   version == MatVersion::V5 ? MAT_COMPRESSION_ZLIB : MAT_COMPRESSION_NONE) != 0)
    fail("matio cannot write 'layers'");
}

/// The 43 layers of imagenet-vgg-verydeep-19.mat with random conv weights
/// (He-normal, biases uniform in [-0.1, 0.1)) and channel counts divided by
/// `divisor`; FC layers are written without weights. For tests and demos.
inline std::vector<MatLayerSpec> random_vgg19_layers(int divisor, std::uint64_t seed) {
  if (divisor < 1 || 64 % divisor != 0)
    throw ConfigError(cifarnet::detail::concat("random_vgg19_layers: divisor must divide 64, got ", divisor));
  Rng rng(seed);
  std::vector<MatLayerSpec> out;
  const auto& convs = vgg19_convs();
  for (const char* name : vgg19_mat_layer_names()) {
    MatLayerSpec l;
    l.name = name;
    const std::string n = name;
    l.type = n.rfind("conv", 0) == 0   ? "conv"
             : n.rfind("relu", 0) == 0 ? "relu"
             : n.rfind("pool", 0) == 0 ? "pool"
             : n == "prob"             ? "softmax"
                                       : "conv";
    auto it = std::find_if(convs.begin(), convs.end(), [&](const Vgg19Conv& c) { return n == c.name; });
    if (it != convs.end()) {
      const std::size_t cin = it->in == 3 ? 3 : std::size_t(it->in / divisor),
                        cout = std::size_t(it->out / divisor);
      l.has_weights = true;
      l.filter_shape = {3, 3, cin, cout};
      l.filters.resize(9 * cin * cout);
      const double sd = std::sqrt(2.0 / double(9 * cin));
      for (float& v : l.filters) v = float(rng.normal(0.0, sd));
      l.bias_shape = {1, cout};
      l.biases.resize(cout);
      for (float& v : l.biases) v = float(rng.uniform(-0.1, 0.1));
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace cifarnet::io

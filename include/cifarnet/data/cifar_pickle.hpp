// cifarnet/data/cifar_pickle.hpp — a reader of CIFAR-10's python version
// (cifar-10-batches-py/, the seed's converter input): each batch file is a
// pickled dict {b'data': uint8 ndarray of shape (N, 3072), one row per image
// in CHW order, b'labels': list of N ints, b'batch_label': bytes,
// b'filenames': list of bytes}; batches.meta holds b'label_names'.
//
// pickle::load is a bounded interpreter of the subset of Python's pickle
// format these files use — never a general unpickler: the canonical files
// (Python 2's cPickle, protocol 2: str keys and data, numpy's
// multiarray._reconstruct and dtype), and what Python 3's pickle writes for
// the same dict at protocols 2 to 5 (bytes as _codecs.encode at protocol 2,
// BINBYTES from 3, FRAME / STACK_GLOBAL / MEMOIZE at 4, numpy's _frombuffer
// at 5). The only callables it knows are these, recognised by their GLOBAL
// names; any other opcode or callable is a DataError naming the file, the
// byte offset and the opcode. Every length is checked against the bytes that
// remain before anything is allocated, nesting is limited (kMaxDepth), and a
// container can only receive values that cannot contain it (no cycles).
//
// read_cifar10_python(dir, split) returns the same ImageSet as
// read_cifar10() of the binary set with the same images: data[i] is the
// record's 3,072 pixel bytes (TF_SEMANTICS.md §1 splits: batches 1-4 train,
// 5 validation, test_batch eval).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cifarnet/core/error.hpp"
#include "cifarnet/data/cifar.hpp"
#include "cifarnet/data/image.hpp"
#include "cifarnet/io/file.hpp"

namespace cifarnet {
namespace data {
namespace pickle {

/// The kinds of value the subset builds.
enum class Kind { none, boolean, integer, bytes, text, tuple, list, dict, global, ndarray, dtype };

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::bytes:
      return "bytes";
    case Kind::text:
      return "str";
    case Kind::tuple:
      return "tuple";
    case Kind::list:
      return "list";
    case Kind::dict:
      return "dict";
    case Kind::global:
      return "global";
    case Kind::ndarray:
      return "numpy.ndarray";
    case Kind::dtype:
      return "numpy.dtype";
  }
  return "?";
}

struct Value;
using Ref = std::shared_ptr<Value>;

/// A value of the subset. ndarray: `s` holds the raw bytes (C order),
/// `shape` the dimensions, `dtype` the descriptor ("u1", ...); an ndarray
/// made by _reconstruct is empty until BUILD gives it its state.
struct Value {
  Kind kind = Kind::none;
  std::int64_t i = 0;                     ///< boolean, integer
  std::string s;                          ///< bytes, text (UTF-8), global module, ndarray data
  std::string name;                       ///< global name
  std::vector<Ref> items;                 ///< tuple, list
  std::vector<std::pair<Ref, Ref>> dict;  ///< dict, in insertion order
  std::vector<std::int64_t> shape;        ///< ndarray
  std::string dtype;                      ///< ndarray, dtype: "u1", "i8", ...
  char byteorder = '|';                   ///< dtype: '|', '<', '>', '='
  bool built = false;                     ///< ndarray, dtype: BUILD has given the state
  int depth = 0;                          ///< nesting of tuples (kMaxDepth bounds it)

  /// The text of a bytes or str value (a dict key).
  bool is_string() const { return kind == Kind::bytes || kind == Kind::text; }
};

/// Deepest tuple nesting accepted (CIFAR's files nest 3 deep).
inline constexpr int kMaxDepth = 32;
/// The most keys of a dict, and the longest key (CIFAR's dicts: 4 short keys).
inline constexpr std::size_t kMaxKeys = 256, kMaxKey = 256;
/// What the reader may allocate for a file of n bytes: kBudgetPerByte * n +
/// kBudgetBase bytes of values and copies (a CIFAR batch needs about 2 n).
inline constexpr std::uint64_t kBudgetPerByte = 8, kBudgetBase = 64 * 1024;

namespace detail {

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size, const std::string& path)
      : p_(data), n_(size), budget_(kBudgetPerByte * std::uint64_t(size) + kBudgetBase), path_(path) {}

  Ref run() {
    if (n_ == 0) fail(0, "file is empty (expected a pickle)");
    for (;;) {
      if (pos_ >= n_) fail(pos_, "the pickle ends without STOP ('.')");
      op_at_ = pos_;
      const std::uint8_t op = p_[pos_++];
      switch (op) {
        case 0x80: {  // PROTO
          const int proto = u8();
          if (proto < 2 || proto > 5)
            fail(op_at_,
                 "pickle protocol " + std::to_string(proto) + " (this reader reads protocols 2 to 5)");
          break;
        }
        case 0x95:  // FRAME: a length prefix only
          if (u64() > n_ - pos_) fail(op_at_, "FRAME longer than the rest of the file");
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty())
            fail(op_at_, cifarnet::detail::concat("STOP with ", stack_.size(), " values and ", marks_.size(),
                                                  " marks on the stack (expected one value)"));
          return stack_.back();
        case 'N':
          push(make(Kind::none));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          Ref v = make(Kind::boolean);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'K':
          push_int(u8());
          break;
        case 'M':
          push_int(std::int64_t(le(2)));
          break;
        case 'J': {
          const std::uint32_t u = u32();
          std::int32_t v;
          std::memcpy(&v, &u, 4);
          push_int(v);
          break;
        }
        case 0x8a:  // LONG1
          push_int(long_bytes(u8()));
          break;
        case 'U':  // SHORT_BINSTRING (Python 2 str)
          push_bytes(Kind::bytes, u8());
          break;
        case 'T':  // BINSTRING
          push_bytes(Kind::bytes, u32());
          break;
        case 'C':  // SHORT_BINBYTES
          push_bytes(Kind::bytes, u8());
          break;
        case 'B':  // BINBYTES
          push_bytes(Kind::bytes, u32());
          break;
        case 0x8e:  // BINBYTES8
        case 0x96:  // BYTEARRAY8 (protocol 5: numpy's in-band buffer)
          push_bytes(Kind::bytes, u64());
          break;
        case 0x8c:  // SHORT_BINUNICODE
          push_bytes(Kind::text, u8());
          break;
        case 'X':  // BINUNICODE
          push_bytes(Kind::text, u32());
          break;
        case 0x8d:  // BINUNICODE8
          push_bytes(Kind::text, u64());
          break;
        case ')':
          push(make_tuple(0));
          break;
        case 0x85:
        case 0x86:
        case 0x87:  // TUPLE1..3
          push(make_tuple(std::size_t(op - 0x84)));
          break;
        case 't':  // TUPLE: from the last mark
          push(make_tuple(stack_.size() - pop_mark()));
          break;
        case ']':
          push(make(Kind::list));
          break;
        case '}':
          push(make(Kind::dict));
          break;
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case 'a': {  // APPEND
          Ref v = pop();
          append(top(), v);
          break;
        }
        case 'e': {  // APPENDS
          const std::size_t m = pop_mark();
          if (m == 0) fail(op_at_, "APPENDS without a list below its mark");
          Ref list = stack_[m - 1];
          for (std::size_t k = m; k < stack_.size(); ++k) append(list, stack_[k]);
          stack_.resize(m);
          break;
        }
        case 's': {  // SETITEM
          Ref v = pop();
          Ref k = pop();
          set_item(top(), k, v);
          break;
        }
        case 'u': {  // SETITEMS
          const std::size_t m = pop_mark();
          if ((stack_.size() - m) % 2 != 0) fail(op_at_, "SETITEMS with an odd number of values");
          if (m == 0) fail(op_at_, "SETITEMS without a dict below its mark");
          Ref d = stack_[m - 1];
          for (std::size_t k = m; k < stack_.size(); k += 2) set_item(d, stack_[k], stack_[k + 1]);
          stack_.resize(m);
          break;
        }
        case 'q':  // BINPUT
          put(u8());
          break;
        case 'r':  // LONG_BINPUT
          put(u32());
          break;
        case 0x94:  // MEMOIZE
          put(memo_.size());
          break;
        case 'h':  // BINGET
          get(u8());
          break;
        case 'j':  // LONG_BINGET
          get(u32());
          break;
        case 'c': {  // GLOBAL "module\nname\n"
          Ref g = make(Kind::global);
          g->s = line();
          g->name = line();
          push(g);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Ref name = pop(), module = pop();
          if (module->kind != Kind::text || name->kind != Kind::text)
            fail(op_at_, "STACK_GLOBAL needs two str values");
          Ref g = make(Kind::global);
          g->s = module->s;
          g->name = name->s;
          push(g);
          break;
        }
        case 'R': {  // REDUCE
          Ref args = pop(), callable = pop();
          push(reduce(*callable, *args));
          break;
        }
        case 'b': {  // BUILD
          Ref state = pop();
          build(top(), *state);
          break;
        }
        default:
          fail(op_at_,
               cifarnet::detail::concat("unsupported pickle opcode 0x", hex(op),
                                        printable(op) ? std::string(" ('") + char(op) + "')" : "",
                                        " (this reader knows only what CIFAR-10's python batches use)"));
      }
    }
  }

 private:
  // Every value made and every byte a value copies count against a budget
  // of a few times the file's size, so no sequence of opcodes, memo gets
  // and reduces can make the reader allocate far more than it read.
  void charge(std::uint64_t bytes) {
    if (bytes > budget_)
      fail(op_at_, "the pickle's values would take more memory than a few times the file's size");
    budget_ -= bytes;
  }
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw DataError(cifarnet::detail::at_file(path_, at, what));
  }
  static std::string hex(std::uint8_t b) {
    const char* d = "0123456789abcdef";
    return {d[b >> 4], d[b & 15]};
  }
  static bool printable(std::uint8_t b) { return b >= 0x20 && b < 0x7f; }

  void need(std::uint64_t bytes) const {
    if (bytes > n_ - pos_)
      fail(op_at_, cifarnet::detail::concat("the opcode needs ", bytes, " more bytes, but only ", n_ - pos_,
                                            " remain"));
  }
  std::uint64_t le(int bytes) {
    need(std::uint64_t(bytes));
    std::uint64_t v = 0;
    for (int k = 0; k < bytes; ++k) v |= std::uint64_t(p_[pos_ + std::size_t(k)]) << (8 * k);
    pos_ += std::size_t(bytes);
    return v;
  }
  std::uint8_t u8() { return std::uint8_t(le(1)); }
  std::uint32_t u32() { return std::uint32_t(le(4)); }
  std::uint64_t u64() { return le(8); }
  std::int64_t long_bytes(std::size_t n) {
    if (n > 8) fail(op_at_, cifarnet::detail::concat("LONG1 of ", n, " bytes (at most 8 are read)"));
    need(n);
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < n; ++k) v |= std::uint64_t(p_[pos_ + k]) << (8 * k);
    if (n > 0 && n < 8 && (p_[pos_ + n - 1] & 0x80)) v |= ~std::uint64_t(0) << (8 * n);  // sign
    pos_ += n;
    std::int64_t s;
    std::memcpy(&s, &v, 8);
    return s;
  }
  // A GLOBAL's line: printable ASCII up to '\n', at most 256 bytes.
  std::string line() {
    std::string s;
    for (;;) {
      if (pos_ >= n_) fail(op_at_, "GLOBAL: the file ends inside its name");
      const std::uint8_t c = p_[pos_++];
      if (c == '\n') return s;
      if (!printable(c) || s.size() >= 256) fail(op_at_, "GLOBAL: not a module or attribute name");
      s.push_back(char(c));
    }
  }

  Ref make(Kind k) {
    charge(sizeof(Value));  // one opcode byte could otherwise cost a whole Value
    auto v = std::make_shared<Value>();
    v->kind = k;
    return v;
  }
  void push(Ref v) { stack_.push_back(std::move(v)); }
  void push_int(std::int64_t i) {
    Ref v = make(Kind::integer);
    v->i = i;
    push(v);
  }
  void push_bytes(Kind k, std::uint64_t len) {
    need(len);
    charge(len);
    Ref v = make(k);
    v->s.assign(reinterpret_cast<const char*>(p_ + pos_), std::size_t(len));
    pos_ += std::size_t(len);
    push(v);
  }
  Ref pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail(op_at_, "the pickle's stack underflows");
    Ref v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ref& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail(op_at_, "the pickle's stack underflows");
    return stack_.back();
  }
  std::size_t pop_mark() {
    if (marks_.empty()) fail(op_at_, "no MARK on the stack");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  Ref make_tuple(std::size_t count) {
    if (count > stack_.size() - (marks_.empty() ? 0 : marks_.back()))
      fail(op_at_, "the pickle's stack underflows");
    Ref t = make(Kind::tuple);
    t->items.assign(stack_.end() - std::ptrdiff_t(count), stack_.end());
    stack_.resize(stack_.size() - count);
    for (const Ref& x : t->items) t->depth = std::max(t->depth, x->depth + 1);
    if (t->depth > kMaxDepth)
      fail(op_at_, cifarnet::detail::concat("tuples nested more than ", kMaxDepth, " deep"));
    return t;
  }
  void put(std::size_t index) {
    if (stack_.empty()) fail(op_at_, "memo put with an empty stack");
    memo_[index] = stack_.back();
  }
  void get(std::size_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail(op_at_, cifarnet::detail::concat("memo entry ", index, " was never stored"));
    push(it->second);
  }

  // Only scalars enter a list, and a dict takes no dict or tuple: no
  // container can come to hold itself.
  static bool scalar(const Value& v) {
    return v.kind == Kind::none || v.kind == Kind::boolean || v.kind == Kind::integer || v.is_string();
  }
  void append(const Ref& list, const Ref& v) {
    if (list->kind != Kind::list)
      fail(op_at_, std::string("APPEND to a ") + kind_name(list->kind) + " (expected a list)");
    if (!scalar(*v))
      fail(op_at_, std::string("a list element of kind ") + kind_name(v->kind) +
                       " (CIFAR's lists hold numbers and strings)");
    list->items.push_back(v);
  }
  void set_item(const Ref& d, const Ref& k, const Ref& v) {
    if (d->kind != Kind::dict)
      fail(op_at_, std::string("SETITEM on a ") + kind_name(d->kind) + " (expected a dict)");
    if (!k->is_string() || k->s.size() > kMaxKey)
      fail(op_at_, std::string("a dict key of kind ") + kind_name(k->kind) +
                       " (expected bytes or str of at most " + std::to_string(kMaxKey) + " bytes)");
    if (!scalar(*v) && v->kind != Kind::list && v->kind != Kind::ndarray)
      fail(op_at_, std::string("a dict value of kind ") + kind_name(v->kind) +
                       " (CIFAR's dicts hold arrays, lists, numbers and strings)");
    for (auto& kv : d->dict)
      if (kv.first->s == k->s) {
        kv.second = v;
        return;
      }
    if (d->dict.size() >= kMaxKeys) fail(op_at_, "a dict of more than " + std::to_string(kMaxKeys) + " keys");
    d->dict.emplace_back(k, v);
  }

  static bool is(const Value& g, const char* module, const char* name) {
    return g.kind == Kind::global && g.s == module && g.name == name;
  }
  static bool is_numpy(const Value& g, const char* submodule, const char* name) {
    return is(g, (std::string("numpy.core.") + submodule).c_str(), name) ||
           is(g, (std::string("numpy._core.") + submodule).c_str(), name);
  }
  const Value& arg(const Value& args, std::size_t k, Kind kind, const char* what) const {
    if (k >= args.items.size() || args.items[k]->kind != kind)
      fail(op_at_, cifarnet::detail::concat(what, ": argument ", k, " is not a ", kind_name(kind)));
    return *args.items[k];
  }
  static bool truth(const Value& v) {
    return (v.kind == Kind::boolean || v.kind == Kind::integer) ? v.i != 0 : v.kind != Kind::none;
  }

  Ref reduce(const Value& f, const Value& args) {
    if (f.kind != Kind::global) fail(op_at_, std::string("REDUCE of a ") + kind_name(f.kind));
    if (args.kind != Kind::tuple) fail(op_at_, "REDUCE whose arguments are not a tuple");
    const std::string callable = f.s + "." + f.name;
    if (is_numpy(f, "multiarray", "_reconstruct")) {  // (ndarray, (0,), b'b'): an empty array
      if (args.items.size() != 3 || !(is(*args.items[0], "numpy", "ndarray")))
        fail(op_at_, callable + ": expected the arguments (numpy.ndarray, (0,), b'b')");
      Ref a = make(Kind::ndarray);
      return a;
    }
    if (is(f, "numpy", "dtype")) {  // ('u1', False, True), then BUILD with its state
      if (args.items.empty() || !args.items[0]->is_string() || args.items[0]->s.size() > 16)
        fail(op_at_, "numpy.dtype: the first argument is not a type string");
      Ref t = make(Kind::dtype);
      t->dtype = args.items[0]->s;
      return t;
    }
    if (is(f, "_codecs", "encode")) {  // Python 3, protocol 2: bytes as encode(str, 'latin1')
      const Value& text = arg(args, 0, Kind::text, callable.c_str());
      const Value& enc = arg(args, 1, Kind::text, callable.c_str());
      if (args.items.size() != 2 || (enc.s != "latin1" && enc.s != "latin-1"))
        fail(op_at_, callable + ": only the encoding 'latin1' is read, got '" + enc.s + "'");
      Ref b = make(Kind::bytes);
      charge(text.s.size());
      b->s = latin1(text.s);
      return b;
    }
    if ((is(f, "builtins", "bytes") || is(f, "__builtin__", "bytes")) && args.items.empty())
      return make(Kind::bytes);  // Python 3, protocol 2: b''
    if ((is(f, "builtins", "bytearray") || is(f, "__builtin__", "bytearray")) && args.items.size() <= 1) {
      Ref b = make(Kind::bytes);  // protocol 5's in-band buffer of an empty array
      if (!args.items.empty()) {
        if (!args.items[0]->is_string()) fail(op_at_, callable + ": the argument is not bytes");
        charge(args.items[0]->s.size());
        b->s = args.items[0]->s;
      }
      return b;
    }
    if (is_numpy(f, "numeric", "_frombuffer")) {  // protocol 5: (buffer, dtype, shape, order)
      const Value& buf = arg(args, 0, Kind::bytes, callable.c_str());
      const Value& dt = arg(args, 1, Kind::dtype, callable.c_str());
      const Value& shape = arg(args, 2, Kind::tuple, callable.c_str());
      if (args.items.size() != 4 || !args.items[3]->is_string() || args.items[3]->s != "C")
        fail(op_at_, callable + ": only C-ordered arrays are read");
      Ref a = make(Kind::ndarray);
      set_array(*a, shape, dt, buf.s);
      return a;
    }
    fail(op_at_, "REDUCE of " + callable +
                     ": not one of the callables CIFAR's python batches use "
                     "(numpy's _reconstruct, _frombuffer and dtype, _codecs.encode)");
  }

  // A str (UTF-8) of code points below 256 as the bytes they name.
  std::string latin1(const std::string& utf8) const {
    std::string out;
    out.reserve(utf8.size());
    for (std::size_t k = 0; k < utf8.size(); ++k) {
      const auto c = std::uint8_t(utf8[k]);
      if (c < 0x80) {
        out.push_back(char(c));
      } else if ((c == 0xc2 || c == 0xc3) && k + 1 < utf8.size() &&
                 (std::uint8_t(utf8[k + 1]) & 0xc0) == 0x80) {
        out.push_back(char(((c & 0x03) << 6) | (std::uint8_t(utf8[k + 1]) & 0x3f)));
        ++k;
      } else {
        fail(op_at_, "_codecs.encode: the str holds a character that is not latin-1");
      }
    }
    return out;
  }

  void set_array(Value& a, const Value& shape, const Value& dt, const std::string& raw) {
    std::uint64_t count = 1;
    a.shape.clear();
    for (const Ref& d : shape.items) {
      if (d->kind != Kind::integer || d->i < 0)
        fail(op_at_, "ndarray: a dimension is not a non-negative int");
      if (d->i > 0 && count > (std::uint64_t(1) << 62) / std::uint64_t(d->i))
        fail(op_at_, "ndarray: the shape's size overflows");
      count *= std::uint64_t(d->i);
      a.shape.push_back(d->i);
    }
    const std::uint64_t item = itemsize(dt.dtype);
    if (item == 0) fail(op_at_, "ndarray: dtype '" + dt.dtype + "' is not read (uint8 and integers only)");
    if (count > raw.size() / item || count * item != raw.size())
      fail(op_at_, cifarnet::detail::concat("ndarray: shape of ", count, " elements of ", item,
                                            " bytes, but ", raw.size(), " bytes of data"));
    if (item > 1 && dt.byteorder == '>') fail(op_at_, "ndarray: big-endian data is not read");
    if (!dt.built) fail(op_at_, "ndarray: its dtype has no state");
    a.dtype = dt.dtype;
    charge(raw.size());
    a.s = raw;
    a.built = true;
  }
  static std::uint64_t itemsize(const std::string& d) {
    if (d == "u1" || d == "i1" || d == "|u1" || d == "|i1" || d == "b1") return 1;
    if (d == "i2" || d == "u2") return 2;
    if (d == "i4" || d == "u4") return 4;
    if (d == "i8" || d == "u8") return 8;
    return 0;
  }

  void build(const Ref& obj, const Value& state) {
    if (obj->built)
      fail(op_at_, std::string("BUILD of a ") + kind_name(obj->kind) + " that already has its state");
    if (obj->kind ==
        Kind::dtype) {  // (version, byteorder, subarray, names, fields, elsize, alignment, flags)
      if (state.kind != Kind::tuple || state.items.size() < 8 || !state.items[1]->is_string() ||
          state.items[1]->s.size() != 1 || state.items[2]->kind != Kind::none ||
          state.items[3]->kind != Kind::none || state.items[4]->kind != Kind::none)
        fail(op_at_, "numpy.dtype: a state other than a plain number type's");
      obj->byteorder = state.items[1]->s[0];
      obj->built = true;
      return;
    }
    if (obj->kind == Kind::ndarray) {  // (version, shape, dtype, is_fortran, raw data)
      if (state.kind != Kind::tuple || state.items.size() != 5 || state.items[1]->kind != Kind::tuple ||
          state.items[2]->kind != Kind::dtype || !state.items[4]->is_string())
        fail(op_at_, "ndarray: the state is not (version, shape, dtype, is_fortran, data bytes)");
      const Value& shape = *state.items[1];
      if (truth(*state.items[3]) && shape.items.size() > 1)
        fail(op_at_, "ndarray: Fortran order is not read");
      if (!state.items[2]->built) fail(op_at_, "ndarray: its dtype has no state");
      set_array(*obj, shape, *state.items[2], state.items[4]->s);
      return;
    }
    fail(op_at_, std::string("BUILD of a ") + kind_name(obj->kind));
  }

  const std::uint8_t* p_;
  std::size_t n_, pos_ = 0, op_at_ = 0;
  std::uint64_t budget_;
  std::string path_;
  std::vector<Ref> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::size_t, Ref> memo_;
};

}  // namespace detail

/// Interprets a pickle (the subset above); DataError naming `path` and the
/// byte offset on anything else.
inline Ref load(const std::uint8_t* data, std::size_t size, const std::string& path) {
  return detail::Reader(data, size, path).run();
}

/// The value of key `key` (bytes or str) in dict `d`; null when absent.
inline const Value* find(const Value& d, const std::string& key) {
  for (const auto& kv : d.dict)
    if (kv.first->s == key) return kv.second.get();
  return nullptr;
}

}  // namespace pickle

/// File names (relative to cifar-10-batches-py/) making up a split.
inline std::vector<std::string> cifar10_python_files(Split s) {
  std::vector<std::string> names = cifar10_files(s);
  for (auto& n : names) n.resize(n.size() - 4);  // without ".bin"
  return names;
}

/// Parses one CIFAR-10 python batch (the bytes of `path`): its data array
/// and labels as an ImageSet identical to the binary batch's.
inline ImageSet parse_cifar10_pickle(const std::uint8_t* data, std::size_t size, const std::string& path) {
  const pickle::Ref root = pickle::load(data, size, path);
  auto fail = [&](const std::string& what) -> DataError {
    return DataError(cifarnet::detail::at_file(path, 0, "CIFAR-10 python batch: " + what));
  };
  if (root->kind != pickle::Kind::dict)
    throw fail(std::string("the pickle holds a ") + kind_name(root->kind) + ", not a dict");
  const pickle::Value* arr = pickle::find(*root, "data");
  const pickle::Value* labels = pickle::find(*root, "labels");
  if (!arr || arr->kind != pickle::Kind::ndarray) throw fail("no 'data' array");
  if (!labels || labels->kind != pickle::Kind::list) throw fail("no 'labels' list");
  if (!arr->built) throw fail("'data' has no state (no BUILD)");
  if (arr->dtype != "u1" && arr->dtype != "|u1")
    throw fail("'data' is of dtype '" + arr->dtype + "', not uint8");
  if (arr->shape.size() != 2 || arr->shape[1] != std::int64_t(kCifarGeometry.size()))
    throw fail(cifarnet::detail::concat("'data' is not of shape (N, ", kCifarGeometry.size(), ")"));
  const std::size_t n = std::size_t(arr->shape[0]);
  if (n == 0) throw fail("'data' holds no image");
  if (labels->items.size() != n)
    throw fail(
        cifarnet::detail::concat("'labels' has ", labels->items.size(), " entries for ", n, " images"));
  ImageSet set;
  set.geometry = kCifarGeometry;
  set.num_classes = 10;
  set.labels.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const pickle::Value& l = *labels->items[k];
    if (l.kind != pickle::Kind::integer || l.i < 0 || l.i >= 10)
      throw fail(cifarnet::detail::concat(
          "label ", k, " is ", l.kind == pickle::Kind::integer ? std::to_string(l.i) : kind_name(l.kind),
          ", not in [0, 10)"));
    set.labels[k] = std::int32_t(l.i);
  }
  set.pixels.assign(arr->s.begin(), arr->s.end());
  return set;
}

/// Reads one CIFAR-10 python batch file.
inline ImageSet read_cifar10_pickle_file(const std::string& path) {
  const std::vector<std::uint8_t> bytes = io::read_file(path);
  return parse_cifar10_pickle(bytes.data(), bytes.size(), path);
}

/// The class names of a batches.meta pickle (its 'label_names').
inline std::vector<std::string> parse_cifar10_pickle_meta(const std::uint8_t* data, std::size_t size,
                                                          const std::string& path) {
  const pickle::Ref root = pickle::load(data, size, path);
  const pickle::Value* names =
      root->kind == pickle::Kind::dict ? pickle::find(*root, "label_names") : nullptr;
  if (!names || names->kind != pickle::Kind::list)
    throw DataError(cifarnet::detail::at_file(path, 0, "CIFAR-10 batches.meta: no 'label_names' list"));
  std::vector<std::string> out;
  for (const auto& v : names->items) {
    if (!v->is_string())
      throw DataError(
          cifarnet::detail::at_file(path, 0, "CIFAR-10 batches.meta: a label name is not a string"));
    out.push_back(v->s);
  }
  if (out.size() != 10)
    throw DataError(cifarnet::detail::at_file(
        path, 0,
        cifarnet::detail::concat("CIFAR-10 batches.meta: expected 10 label names, found ", out.size())));
  return out;
}

/// Reads a CIFAR-10 split from `dir` (the cifar-10-batches-py directory);
/// class names from its batches.meta when present, else the standard ones.
inline ImageSet read_cifar10_python(const std::string& dir, Split split) {
  ImageSet set;
  for (const auto& f : cifar10_python_files(split)) {
    const std::string path = detail::join_path(dir, f);
    if (set.labels.empty())
      set = read_cifar10_pickle_file(path);
    else
      set.append(read_cifar10_pickle_file(path));
  }
  const std::string meta = detail::join_path(dir, "batches.meta");
  std::error_code ec;
  if (std::filesystem::is_regular_file(meta, ec)) {
    const auto bytes = io::read_file(meta);
    set.class_names = parse_cifar10_pickle_meta(bytes.data(), bytes.size(), meta);
  } else {
    set.class_names = cifar10_default_class_names();
  }
  return set;
}

/// The directory the python set unpacks to (cifar-10-python.tar.gz).
inline constexpr const char* kCifar10PyDir = "cifar-10-batches-py";

/// True when `dir` holds the python set's six batch files (data_batch_1..5,
/// test_batch; their contents are checked when read).
inline bool has_cifar10_python(const std::string& dir) {
  std::vector<std::string> names = cifar10_python_files(Split::train_all);
  names.push_back(cifar10_python_files(Split::eval).front());
  for (const auto& name : names) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / name, ec)) return false;
  }
  return true;
}

/// The directory holding the python batches for a --data-dir: `dir` or its
/// cifar-10-batches-py/ (the seed's layout); empty when neither does.
inline std::string cifar10_python_dir(const std::string& dir) {
  if (has_cifar10_python(dir)) return dir;
  const std::string sub = detail::join_path(dir, kCifar10PyDir);
  return has_cifar10_python(sub) ? sub : std::string();
}

}  // namespace data
}  // namespace cifarnet

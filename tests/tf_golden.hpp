// tests/tf_golden.hpp — reads the TensorFlow-made goldens of
// tests/fixtures/tf/ (written once by scripts/tf_goldens/make_tf_goldens.py
// and make_tf_network_goldens.py; no test runs Python or TensorFlow) and
// compares outputs with them.
//
// A fixture is a safetensors file: case "<name>" holds tensors
// "<name>/<tensor>", and the metadata entry "tf_goldens" is a JSON object
// {"tf_version", ..., "cases": {"<name>": {"op": ..., parameters}}}.
//
// Closeness: the worst element of |out - tf| / max(|tf|, rms(tf)) — a
// relative error per element, floored at the tensor's RMS magnitude so that
// values that cancel to almost zero do not turn rounding into a failure.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <cifarnet/core/error.hpp>
#include <cifarnet/io/safetensors.hpp>

namespace cifarnet {
namespace test {

class TfGoldens {
 public:
  /// Loads tests/fixtures/tf/<file>; Error naming the file when it is not a
  /// goldens file.
  explicit TfGoldens(const std::string& file)
      : path_(std::string(CIFARNET_SOURCE_DIR) + "/tests/fixtures/tf/" + file),
        dict_(io::read_safetensors(path_)) {
    const auto it = dict_.metadata.find("tf_goldens");
    if (it == dict_.metadata.end())
      throw Error(path_ + ": no \"tf_goldens\" metadata entry (not written by scripts/tf_goldens/)");
    try {
      meta_ = nlohmann::json::parse(it->second);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path_ + ": the \"tf_goldens\" metadata is not JSON: " + e.what());
    }
    if (!meta_.contains("cases") || !meta_["cases"].is_object() || !meta_.contains("tf_version"))
      throw Error(path_ + ": the \"tf_goldens\" metadata lacks \"cases\" or \"tf_version\"");
  }

  const std::string& path() const { return path_; }
  std::string tf_version() const { return meta_["tf_version"].get<std::string>(); }

  /// Names of the cases of one op, sorted.
  std::vector<std::string> cases(const std::string& op) const {
    std::vector<std::string> out;
    for (const auto& [name, params] : meta_["cases"].items())
      if (params.value("op", "") == op) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// A case's parameters (Error if there is no such case).
  const nlohmann::json& params(const std::string& name) const {
    const auto& c = meta_["cases"];
    if (!c.contains(name)) throw Error(path_ + ": no case '" + name + "'");
    return c[name];
  }

  const cifarnet::TensorData& tensor(const std::string& name) const {
    const cifarnet::TensorData* t = dict_.find(name);
    if (!t) throw Error(path_ + ": no tensor '" + name + "'");
    return *t;
  }
  std::vector<float> f32(const std::string& name) const { return tensor(name).values<float>(); }
  std::vector<std::uint8_t> u8(const std::string& name) const { return tensor(name).values<std::uint8_t>(); }
  const std::vector<std::size_t>& shape(const std::string& name) const { return tensor(name).shape; }

 private:
  std::string path_;
  cifarnet::StateDict dict_;
  nlohmann::json meta_;
};

/// How far an output is from TensorFlow's: the worst element's error
/// |out - tf| / max(|tf|, rms(tf)), where it is, and both values there.
struct Closeness {
  double worst = 0;
  std::size_t at = 0;
  double got = 0, want = 0;
  bool sizes_match = true;
  std::string str() const {
    std::ostringstream s;
    if (!sizes_match) return "sizes differ";
    s << "worst relative error " << worst << " at element " << at << " (got " << got << ", TensorFlow "
      << want << ")";
    return s.str();
  }
};

template <class T>
Closeness closeness(const std::vector<T>& got, const std::vector<float>& want) {
  Closeness c;
  if (got.size() != want.size()) {
    c.sizes_match = false;
    c.worst = HUGE_VAL;
    return c;
  }
  double ss = 0;
  for (float v : want) ss += double(v) * double(v);
  const double rms = want.empty() ? 0.0 : std::sqrt(ss / double(want.size()));
  if (!got.empty()) {
    c.got = double(got[0]);
    c.want = double(want[0]);
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]), w = double(want[i]);
    const double floor = std::max(std::abs(w), rms);
    double e = floor > 0 ? std::abs(g - w) / floor : std::abs(g - w);
    if (std::isnan(e)) e = HUGE_VAL;  // a NaN anywhere fails
    if (e > c.worst) {
      c.worst = e;
      c.at = i;
      c.got = g;
      c.want = w;
    }
  }
  return c;
}

/// The fixture of scripts/tf_goldens/make_tf_network_goldens.py (whole
/// networks), read once.
inline const TfGoldens& network_goldens() {
  static const TfGoldens g("networks.safetensors");
  return g;
}

/// make_tf_network_goldens.py's draw(): float(offset + scale * u) for u in
/// [-1, 1) from the splitmix64 outputs of state stream * 2^32 + i * gamma,
/// i = 1, 2, ...: the networks' initial values, drawn alike on both sides.
inline std::vector<float> draw_init(std::uint64_t stream, std::size_t n, double offset, double scale) {
  constexpr std::uint64_t kGamma = 0x9E3779B97F4A7C15ULL;
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = (stream << 32) + std::uint64_t(i + 1) * kGamma;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const double u = double(std::int64_t(z >> 40) - (std::int64_t(1) << 23)) / double(1 << 23);
    out[i] = float(offset + scale * u);
  }
  return out;
}

}  // namespace test
}  // namespace cifarnet

/// CHECKs that `got` (a std::vector of float or double) lies within `tol`
/// of the golden `want` (Closeness above); tol = 0 demands equality.
#define CHECK_TF_CLOSE(what, got, want, tol)                            \
  do {                                                                  \
    const auto tf_close_ = ::cifarnet::test::closeness((got), (want));  \
    INFO((what) << ": " << tf_close_.str() << ", tolerance " << (tol)); \
    CHECK(tf_close_.sizes_match);                                       \
    CHECK(tf_close_.worst <= (tol));                                    \
  } while (0)

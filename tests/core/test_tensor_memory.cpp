// Where tensors live (core/tensor_memory.hpp): a TensorMemory made current
// by a scope serves the tensors allocated in it, each block goes back to the
// memory that made it, and a model's layers allocate their buffers while
// they run — what the CUDA backend relies on to keep activations and
// gradients on the GPU (nn/model.hpp; checked on a GPU by
// tests/backend/test_cuda_training.cpp). Here the memory is host memory
// that counts, so the host backends compute on it unchanged.
#include <catch2/catch.hpp>

#include <cifarnet/cifarnet.hpp>
#include <cifarnet/models/resnet.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace cifarnet;

namespace {

/// Host memory that remembers what it handed out.
class CountingMemory final : public TensorMemory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    live.insert(p);
    ++allocations;
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override {
    if (live.erase(p) == 0) ++foreign;  // not ours: a routing error
    std::free(p);
  }
  std::set<void*> live;
  std::size_t allocations = 0, foreign = 0;
};

}  // namespace

TEST_CASE("Tensors allocate from the memory current in their scope and free through the one that made them",
          "[core][tensor_memory]") {
  CountingMemory mem;
  const std::size_t before = detail::TensorMemoryRegistry::instance().live();
  CHECK(current_tensor_memory() == nullptr);
  Tensor<float> host = make_tensor<float>({2, 3, 4, 5}, DataFormat::NCHW);
  Tensor<float> dev;
  Buffer<float> stats;
  {
    const TensorMemoryScope scope(&mem);
    CHECK(current_tensor_memory() == &mem);
    dev = make_tensor<float>({2, 3, 4, 5}, DataFormat::NCHW);  // made (and moved) inside: the memory's
    stats.resize(7);
    {
      const TensorMemoryScope inner(nullptr);  // scopes nest: host memory again
      Tensor<float> h = make_tensor<float>({1, 1, 1, 3}, DataFormat::NCHW);
      CHECK(mem.live.count(h.data()) == 0);
    }
    CHECK(current_tensor_memory() == &mem);
  }
  CHECK(current_tensor_memory() == nullptr);
  CHECK(mem.live.count(dev.data()) == 1);
  CHECK(mem.live.count(stats.data()) == 1);
  CHECK(mem.live.count(host.data()) == 0);
  CHECK(detail::TensorMemoryRegistry::instance().live() == before + 2);

  // A copy made outside a scope is host memory; a resize outside a scope
  // frees the old block through its maker and takes host memory.
  for (std::size_t i = 0; i < dev.size(); ++i) dev.data()[i] = float(i);
  Tensor<float> copy = dev;
  CHECK(mem.live.count(copy.data()) == 0);
  CHECK(copy(1, 2, 3, 4) == dev(1, 2, 3, 4));
  dev.resize({4, 3, 4, 5});
  CHECK(mem.live.count(dev.data()) == 0);
  CHECK(mem.live.size() == 1);
  stats = Buffer<float>();
  CHECK(mem.live.empty());
  CHECK(mem.foreign == 0);
  CHECK(detail::TensorMemoryRegistry::instance().live() == before);
  // Host tensors are 64-byte aligned, as before (vector loads, oneDNN).
  CHECK(reinterpret_cast<std::uintptr_t>(host.data()) % 64 == 0);
}

TEST_CASE(
    "A model's layers size their buffers while they run, in the memory current then, with the same bits",
    "[core][tensor_memory][nn]") {
  // ResNet-8 on the reference backend, trained one step twice from the same
  // seed: once with host memory, once with a counting memory current while
  // it runs (what Model does with a GPU's memory on the CUDA backend). Every
  // activation, gradient and batch-norm statistic the layers keep is then
  // the memory's, the results are the same bits, and destroying the model
  // gives every block back to it.
  using Net = ResNetCifar<>;
  const std::size_t n = 4;
  Rng rng(3);
  Tensor<float> x = make_tensor<float>({n, 3, 32, 32}, DataFormat::NHWC);
  for (auto& v : x) v = float(rng.normal());
  std::vector<std::int32_t> labels{1, 7, 3, 0};

  auto step = [&](TensorMemory* mem, std::vector<float>& logits, std::vector<float>& grads) {
    Model<Net, backend::Reference> net({3, 32, 32}, DataFormat::NHWC, resnet_options(8), 11);
    Tensor<float> dlogits;
    {
      const TensorMemoryScope scope(mem);
      const Tensor<float>& y = net.forward(x, Mode::Train);
      logits.assign(y.begin(), y.end());
      dlogits = y;  // made inside: the memory's too
      softmax_cross_entropy(y, labels, &dlogits);
      net.backward(dlogits);
    }
    const auto& g = net.parameters().grads();
    grads.assign(g.data(), g.data() + g.size());
  };
  std::vector<float> logits[2], grads[2];
  step(nullptr, logits[0], grads[0]);
  CountingMemory mem;
  step(&mem, logits[1], grads[1]);
  CHECK(mem.allocations >= 3 * 7);  // 7 conv+BN layers: at least an output, a gradient and statistics each
  CHECK(mem.live.empty());          // the model and its tensors are gone: every block came back
  CHECK(mem.foreign == 0);
  CHECK(logits[0] == logits[1]);
  CHECK(grads[0] == grads[1]);
}

namespace {

/// The VmFlags of the mapping of /proc/self/smaps that holds `p` ("" where
/// none does, or off Linux).
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return "";
}

bool has_flag(const std::string& flags, const char* f) {
  std::istringstream in(flags);
  std::string w;
  while (in >> w)
    if (w == f) return true;
  return false;
}

}  // namespace

TEST_CASE("Host blocks of 2 MiB or more start on a 2 MiB boundary and are advised as huge pages",
          "[core][tensor_memory]") {
  const std::size_t big = detail::kHugePageBytes / sizeof(float) + 100, small = 1000;
  const bool was = huge_pages();
  set_huge_pages(true);
  const std::size_t advised = detail::huge_page_advised().load();
  Tensor<float> t = make_tensor<float>({1, 1, 1, big}, DataFormat::NHWC);
  Tensor<float> s = make_tensor<float>({1, 1, 1, small}, DataFormat::NHWC);
  HostVector<std::uint16_t> bits(detail::kHugePageBytes / 2 + 8);
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % detail::kHugePageBytes == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(bits.data()) % detail::kHugePageBytes == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(s.data()) % 64 == 0);
  // Only the whole 2 MiB extents are advised; the kernel takes the advice
  // where it has transparent huge pages (Linux with the sysfs switch).
  const bool thp = std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
  INFO("transparent huge pages in this kernel: " << (thp ? "yes" : "no"));
  if (thp) {
    CHECK(detail::huge_page_advised().load() == advised + 2);  // t and bits, not s
    CHECK(has_flag(vm_flags_at(t.data()), "hg"));
    CHECK(has_flag(vm_flags_at(bits.data()), "hg"));
  } else {
    CHECK(detail::huge_page_advised().load() == advised);
  }
  // Off: no advice for new blocks (the alignment stays: it follows the size).
  set_huge_pages(false);
  const std::size_t off = detail::huge_page_advised().load();
  Tensor<float> u = make_tensor<float>({1, 1, 1, big}, DataFormat::NHWC);
  CHECK(detail::huge_page_advised().load() == off);
  CHECK(reinterpret_cast<std::uintptr_t>(u.data()) % detail::kHugePageBytes == 0);
  // Values are values wherever they live.
  for (std::size_t i = 0; i < big; ++i) t.data()[i] = float(i);
  u = t;
  CHECK(u.data()[big - 1] == float(big - 1));
  set_huge_pages(was);
}

TEST_CASE("CIFARNET_STREAMING_STORES is 0 or 1, anything else an error naming it", "[core][tensor_memory]") {
  CHECK(detail::streaming_stores_from_env(nullptr));
  CHECK(detail::streaming_stores_from_env("1"));
  CHECK_FALSE(detail::streaming_stores_from_env(" 0 "));
  for (const char* bad : {"", "on", "2"}) {
    INFO("CIFARNET_STREAMING_STORES=\"" << bad << "\"");
    CHECK_THROWS_WITH(detail::streaming_stores_from_env(bad),
                      Catch::Matchers::Contains("CIFARNET_STREAMING_STORES=\"" + std::string(bad) + "\"") &&
                          Catch::Matchers::Contains("expected 0 (plain stores only)"));
    CHECK_THROWS_AS(detail::streaming_stores_from_env(bad), ConfigError);
  }
  const bool was = streaming_stores();
  set_streaming_stores(!was);
  CHECK(streaming_stores() == !was);
  set_streaming_stores(was);
}

TEST_CASE("CIFARNET_HUGE_PAGES is 0 or 1, anything else an error naming it", "[core][tensor_memory]") {
  CHECK(detail::huge_pages_from_env(nullptr));
  CHECK(detail::huge_pages_from_env("1"));
  CHECK(detail::huge_pages_from_env(" 1\t"));
  CHECK_FALSE(detail::huge_pages_from_env("0"));
  for (const char* bad : {"", "off", "2", "01x", "yes"}) {
    INFO("CIFARNET_HUGE_PAGES=\"" << bad << "\"");
    CHECK_THROWS_WITH(detail::huge_pages_from_env(bad),
                      Catch::Matchers::Contains("CIFARNET_HUGE_PAGES=\"" + std::string(bad) + "\"") &&
                          Catch::Matchers::Contains("expected 0"));
    CHECK_THROWS_AS(detail::huge_pages_from_env(bad), ConfigError);
  }
}

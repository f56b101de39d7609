// cifarnet/recipes/devices.hpp — the devices a training run uses, asked of
// the build and the machine in one place: the GPUs present (none in a build
// without the CUDA backend), soft placement over them, the line
// --log-device-placement prints, and the cuDNN convolution options of a
// model's devices. The build option (CIFARNET_WITH_CUDA) is tested here, so
// programs need no #ifdef:
//
//   train::GpuPlacement gpus = recipes::place_on_available_gpus(num_gpus, /*soft=*/true);
//   std::cout << recipes::describe_device<backend::OneDnn>() << "\n";
//   recipes::set_cuda_conv_options(net, deterministic, allow_tf32);   // no-op off the CUDA backend
#pragma once

#include <omp.h>

#include <string>
#include <type_traits>

#include "cifarnet/backend/onednn/common.hpp"
#include "cifarnet/backend/tags.hpp"
#include "cifarnet/train/placement.hpp"
#ifdef CIFARNET_WITH_CUDA
#include "cifarnet/backend/cuda/common.hpp"
#endif

namespace cifarnet {
namespace distributed {
template <class ModelT>
class Towers;
}  // namespace distributed

namespace recipes {

// ------------------------------------------------------------ devices

/// Whether this build has the CUDA backend (a program's run_cuda() exists).
#ifdef CIFARNET_WITH_CUDA
inline constexpr bool kHasCudaBackend = true;
#else
inline constexpr bool kHasCudaBackend = false;
#endif

/// The GPUs this process can use, and why there are not more.
struct GpusPresent {
  int count = 0;
  std::string why_none;
};

/// The CUDA devices present (none in a build without the CUDA backend).
inline GpusPresent gpus_present() {
  GpusPresent g;
#ifdef CIFARNET_WITH_CUDA
  g.count = backend::cuda::device_count();
  g.why_none = backend::cuda::no_device_reason();
#else
  g.why_none =
      "this build has no CUDA backend: the CUDA toolkit and cuDNN were not found, or -DCIFARNET_CUDA=OFF";
#endif
  return g;
}

/// train::place_on_gpus with the GPUs this machine and build have (asked
/// only when `requested` > 0).
inline train::GpuPlacement place_on_available_gpus(int requested, bool soft,
                                                   const std::string& flag = "--num-gpus") {
  const GpusPresent g = requested > 0 ? gpus_present() : GpusPresent{};
  return train::place_on_gpus(requested, g.count, g.why_none, soft, flag);
}

template <class Net>
struct is_towers : std::false_type {};
template <class M>
struct is_towers<distributed::Towers<M>> : std::true_type {};

/// --log-device-placement's line for a model on backend B: the GPU and cuDNN
/// version, or the CPU with the oneDNN version and the OpenMP threads.
template <class B>
std::string describe_device() {
#ifdef CIFARNET_WITH_CUDA
  if constexpr (std::is_same_v<B, backend::Cuda>)
    return "device: GPU " + std::to_string(Device<backend::Cuda>().ordinal()) + " (CUDA backend, cuDNN " +
           std::to_string(cudnnGetVersion()) + ")";
#endif
  return "device: CPU, oneDNN " + backend::onednn::version_string() + ", " +
         std::to_string(omp_get_max_threads()) + " OpenMP threads";
}

/// Adds the flags' cuDNN convolution options (reproducible algorithms only,
/// TF32 allowed) to those of every device of `net` (a model or towers) on
/// the CUDA backend, before its first convolution; nothing elsewhere.
template <class Net>
void set_cuda_conv_options([[maybe_unused]] Net& net, [[maybe_unused]] bool deterministic,
                           [[maybe_unused]] bool allow_tf32) {
#ifdef CIFARNET_WITH_CUDA
  if constexpr (std::is_same_v<typename Net::Backend, backend::Cuda>) {
    auto with_flags = [&](Device<backend::Cuda>& d) {
      backend::cuda::ConvOptions co = d.conv_options();  // CIFARNET_CUDA_TF32 / _DETERMINISTIC, or defaults
      co.deterministic = co.deterministic || deterministic;
      co.allow_tf32 = co.allow_tf32 || allow_tf32;
      d.set_conv_options(co);
    };
    if constexpr (is_towers<Net>::value)
      for (std::size_t i = 0; i < net.size(); ++i) with_flags(net.tower(i).device());
    else
      with_flags(net.device());
  }
#endif
}

}  // namespace recipes
}  // namespace cifarnet

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

#include <cstddef>
#include <string>
#include <type_traits>

#include "cifarnet/backend/tags.hpp"
#include "cifarnet/train/placement.hpp"
#ifdef CIFARNET_WITH_CUDA
#include "cifarnet/backend/cuda/device_query.hpp"
#endif

namespace cifarnet {
namespace distributed {
template <class ModelT>
class Towers;
}  // namespace distributed

namespace recipes {

// ------------------------------------------------------------ devices

/// Whether this build has the CUDA backend (a program's CUDA translation unit exists).
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

namespace detail {
/// The line of a backend without its own (backend::Reference): the CPU and
/// its OpenMP threads. A backend's header declares its own,
/// backend::device_description(B) (oneDNN: backend/onednn/common.hpp; CUDA:
/// backend/cuda/common.hpp), found by argument-dependent lookup.
template <class B>
std::string device_description(B) {
  return "device: CPU (" + std::string(B::name) + " backend), " + std::to_string(omp_get_max_threads()) +
         " OpenMP threads";
}
/// Devices without cuDNN convolution options (every backend but CUDA's:
/// backend::add_conv_options(Device<Cuda>&, ...) in backend/cuda/common.hpp).
template <class D>
void add_conv_options(D&, bool, bool) {}
}  // namespace detail

/// --log-device-placement's line for a model on backend B: the GPU and cuDNN
/// version, or the CPU with the oneDNN version and the OpenMP threads (from
/// the backend's header, which the program includes to use the backend).
template <class B>
std::string describe_device() {
  using detail::device_description;
  return device_description(B{});
}

/// Adds the flags' cuDNN convolution options (reproducible algorithms only,
/// TF32 allowed) to those of every device of `net` (a model or towers) on
/// the CUDA backend, before its first convolution; nothing elsewhere.
template <class Net>
void set_cuda_conv_options(Net& net, bool deterministic, bool allow_tf32) {
  using detail::add_conv_options;
  if constexpr (is_towers<Net>::value)
    for (std::size_t i = 0; i < net.size(); ++i)
      add_conv_options(net.tower(i).device(), deterministic, allow_tf32);
  else
    add_conv_options(net.device(), deterministic, allow_tf32);
}

}  // namespace recipes
}  // namespace cifarnet

// cifarnet/backend/cuda.hpp — the CUDA backend (float only): every op as a
// specialization ops::X<backend::Cuda, float> over cuDNN and cuBLAS,
// descriptors and algorithm choices built once per geometry. Ops take device
// pointers, or host pointers staged through device memory, so any model runs
// on it unchanged (backend/cuda/common.hpp). The backend's own kernels
// (optimizer updates, loss, norms, image copies) are compiled at run time with
// NVRTC (backend/cuda/kernels.hpp); optim::cuda::Momentum and ::Adam use them
// (backend/cuda/optim.hpp). Link cifarnet::cuda.
#pragma once

#include "cifarnet/backend/cuda/batch_norm.hpp"
#include "cifarnet/backend/cuda/common.hpp"
#include "cifarnet/backend/cuda/conv2d.hpp"
#include "cifarnet/backend/cuda/dense.hpp"
#include "cifarnet/backend/cuda/elementwise.hpp"
#include "cifarnet/backend/cuda/gemm.hpp"
#include "cifarnet/backend/cuda/kernels.hpp"
#include "cifarnet/backend/cuda/lrn.hpp"
#include "cifarnet/backend/cuda/optim.hpp"
#include "cifarnet/backend/cuda/pool2d.hpp"
#include "cifarnet/backend/cuda/relu.hpp"

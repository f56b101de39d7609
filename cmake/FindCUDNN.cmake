# FindCUDNN — NVIDIA cuDNN (installed with the CUDA toolkit, or beside it),
# used by cifarnet/backend/cuda.hpp. Looks next to CUDAToolkit when that was
# found first. Defines CUDNN_FOUND, CUDNN_VERSION (from cudnn_version.h) and
# the imported target CUDNN::cudnn; find_package(CUDNN 9.0) checks the
# version. NCCL has its own module, FindNCCL.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/cifarnetFindNvidia.cmake)
cifarnet_find_nvidia_library(CUDNN cudnn.h cudnn cudnn_version.h CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)

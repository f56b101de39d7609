# FindNCCL — NVIDIA NCCL (cifarnet/distributed/nccl.hpp), installed with the
# CUDA toolkit or beside it. Looks next to CUDAToolkit when that was found
# first. Defines NCCL_FOUND, NCCL_VERSION (from nccl.h) and the imported
# target NCCL::nccl; find_package(NCCL 2.10) checks the version.
include(${CMAKE_CURRENT_LIST_DIR}/cifarnetFindNvidia.cmake)
cifarnet_find_nvidia_library(NCCL nccl.h nccl nccl.h NCCL_MAJOR NCCL_MINOR NCCL_PATCH)

# FindCUDNN — NVIDIA cuDNN (installed with the CUDA toolkit, or beside it),
# used by cifarnet/backend/cuda.hpp. Looks next to CUDAToolkit when that was
# found first. Defines CUDNN_FOUND, CUDNN_VERSION and the imported target
# CUDNN::cudnn. Also finds NCCL (cifarnet/distributed/nccl.hpp): NCCL_FOUND
# and NCCL::nccl.
set(_cudnn_hints)
if(CUDAToolkit_INCLUDE_DIRS)
  list(APPEND _cudnn_hints ${CUDAToolkit_INCLUDE_DIRS})
endif()
if(CUDAToolkit_LIBRARY_DIR)
  list(APPEND _cudnn_lib_hints ${CUDAToolkit_LIBRARY_DIR})
endif()
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATHS /usr/local/cuda/include)
find_library(CUDNN_LIBRARY cudnn HINTS ${_cudnn_lib_hints} PATHS /usr/local/cuda/lib64)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _v REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_v}")
  set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
endif()
if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_cudnn_hints} PATHS /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${_cudnn_lib_hints} PATHS /usr/local/cuda/lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(NCCL_FOUND TRUE)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)

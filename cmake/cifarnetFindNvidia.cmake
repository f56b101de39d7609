# cifarnet_find_nvidia_library(<Pkg> <header> <lib> <version-header> <major> <minor> <patch>)
# The body of FindCUDNN.cmake and FindNCCL.cmake: finds <header> and library
# <lib> (next to CUDAToolkit when that was found first, else /usr/local/cuda),
# reads <Pkg>_VERSION from the #defines <major>, <minor>, <patch> of
# <version-header>, checks it against find_package's requested version, and
# defines <Pkg>_FOUND and the imported target <Pkg>::<lib>.
include(FindPackageHandleStandardArgs)
macro(cifarnet_find_nvidia_library pkg header lib vheader vmajor vminor vpatch)
  find_path(${pkg}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/local/cuda/include)
  find_library(${pkg}_LIBRARY ${lib} HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS /usr/local/cuda/lib64)
  if(${pkg}_INCLUDE_DIR AND EXISTS "${${pkg}_INCLUDE_DIR}/${vheader}")
    file(STRINGS "${${pkg}_INCLUDE_DIR}/${vheader}" _cn_v REGEX "^#define (${vmajor}|${vminor}|${vpatch}) ")
    string(REGEX REPLACE ".*${vmajor} ([0-9]+).*" "\\1" _cn_maj "${_cn_v}")
    string(REGEX REPLACE ".*${vminor} ([0-9]+).*" "\\1" _cn_min "${_cn_v}")
    string(REGEX REPLACE ".*${vpatch} ([0-9]+).*" "\\1" _cn_pat "${_cn_v}")
    set(${pkg}_VERSION "${_cn_maj}.${_cn_min}.${_cn_pat}")
  endif()
  find_package_handle_standard_args(${pkg} REQUIRED_VARS ${pkg}_LIBRARY ${pkg}_INCLUDE_DIR
                                    VERSION_VAR ${pkg}_VERSION)
  if(${pkg}_FOUND AND NOT TARGET ${pkg}::${lib})
    add_library(${pkg}::${lib} UNKNOWN IMPORTED)
    set_target_properties(${pkg}::${lib} PROPERTIES IMPORTED_LOCATION "${${pkg}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${pkg}_INCLUDE_DIR}")
  endif()
endmacro()

# FindMatio — the MATLAB .mat I/O library (Debian libmatio-dev), used by
# cifarnet/io/matconvnet.hpp. Defines Matio_FOUND, Matio_VERSION and the
# imported target Matio::Matio (include directories, libmatio and, through
# pkg-config, the HDF5 and zlib libraries it needs for v7.3 files).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_MATIO QUIET IMPORTED_TARGET matio)
endif()
if(PC_MATIO_FOUND)
  set(Matio_VERSION ${PC_MATIO_VERSION})
  if(NOT TARGET Matio::Matio)
    add_library(Matio::Matio INTERFACE IMPORTED)
    target_link_libraries(Matio::Matio INTERFACE PkgConfig::PC_MATIO)
  endif()
else()
  find_path(Matio_INCLUDE_DIR matio.h)
  find_library(Matio_LIBRARY matio)
  if(Matio_INCLUDE_DIR AND Matio_LIBRARY AND NOT TARGET Matio::Matio)
    add_library(Matio::Matio UNKNOWN IMPORTED)
    set_target_properties(Matio::Matio PROPERTIES IMPORTED_LOCATION "${Matio_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${Matio_INCLUDE_DIR}")
  endif()
endif()
include(FindPackageHandleStandardArgs)
if(PC_MATIO_FOUND)
  find_package_handle_standard_args(Matio REQUIRED_VARS PC_MATIO_LINK_LIBRARIES VERSION_VAR Matio_VERSION)
else()
  find_package_handle_standard_args(Matio REQUIRED_VARS Matio_LIBRARY Matio_INCLUDE_DIR)
endif()

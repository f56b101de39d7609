# Writes and installs cifarnet.pc (cmake/cifarnet.pc.in), the pkg-config
# file of the header-only core, into <datadir>/pkgconfig (arch-independent,
# where pkg-config looks by default). Included by the top-level
# CMakeLists.txt after cifarnetDependencies.cmake found the dependencies.
#
# The prefix is relative to the .pc file's own directory (${pcfiledir}), so
# the file stays right under `cmake --install --prefix <elsewhere>`. oneDNN
# and xtensor-blas have no .pc file: -ldnnl is listed directly, with -L/-I
# for their directories only where those are not the compiler's own.

set(_cifarnet_pc_dir ${CMAKE_INSTALL_DATADIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_DATADIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(CIFARNET_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(CIFARNET_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _cifarnet_pc_up "/root/${_cifarnet_pc_dir}" "/root")
  string(REGEX REPLACE "/$" "" _cifarnet_pc_up "${_cifarnet_pc_up}")
  set(CIFARNET_PC_PREFIX "\${pcfiledir}/${_cifarnet_pc_up}")
  set(CIFARNET_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()

set(CIFARNET_PC_EXTRA_CFLAGS "")
set(CIFARNET_PC_EXTRA_LIBS "")
foreach(_cifarnet_tgt DNNL::dnnl xtensor-blas)
  get_target_property(_cifarnet_inc ${_cifarnet_tgt} INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_cifarnet_d IN LISTS _cifarnet_inc)
    if(_cifarnet_d AND NOT _cifarnet_d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      string(APPEND CIFARNET_PC_EXTRA_CFLAGS " -I${_cifarnet_d}")
    endif()
  endforeach()
endforeach()
get_target_property(_cifarnet_cfgs DNNL::dnnl IMPORTED_CONFIGURATIONS)
foreach(_c IN LISTS _cifarnet_cfgs)
  get_target_property(_cifarnet_loc DNNL::dnnl IMPORTED_LOCATION_${_c})
  if(_cifarnet_loc)
    get_filename_component(_cifarnet_d "${_cifarnet_loc}" DIRECTORY)
    if(NOT _cifarnet_d IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
      string(APPEND CIFARNET_PC_EXTRA_LIBS " -L${_cifarnet_d}")
    endif()
    break()
  endif()
endforeach()

configure_file(${CMAKE_CURRENT_LIST_DIR}/cifarnet.pc.in ${PROJECT_BINARY_DIR}/cifarnet.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cifarnet.pc DESTINATION ${_cifarnet_pc_dir})

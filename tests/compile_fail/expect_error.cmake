# cmake -DCXX=<compiler> -DSRC=<file> "-DFLAGS=<flag|...>" "-DEXPECT=<text|...>" -P expect_error.cmake
# Passes when compiling SRC fails and the compiler's output contains every
# EXPECT text (plain substrings, in any order: GCC and clang print the
# instantiation context before or after the message).
string(REPLACE "|" ";" FLAGS "${FLAGS}")
string(REPLACE "|" ";" EXPECT "${EXPECT}")
execute_process(COMMAND ${CXX} -std=c++17 -fsyntax-only ${FLAGS} ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but it must not")
endif()
foreach(e IN LISTS EXPECT)
  string(FIND "${out}" "${e}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the compiler's output lacks \"${e}\":\n${out}")
  endif()
endforeach()
message(STATUS "failed to compile as expected, naming: ${EXPECT}")

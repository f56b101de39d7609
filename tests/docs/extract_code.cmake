# cmake -DIN=<page.md> -DOUT=<file.cpp> -DMAX_LINES=<n> [-DTAG=<word>] -P extract_code.cmake
# cmake -DIN=<page.md> -DOUT=<file.cpp> -DMODE=snippets -DPRELUDE=<file.hpp> -P extract_code.cmake
#
# Program mode (the default): writes the page's ```cpp blocks, in order, to
# OUT (a #line per block, so a compiler error points into the page), and
# fails when there is none or when they hold more than MAX_LINES lines. With
# TAG, only the blocks whose fence is "```cpp <TAG>" (a whole program on a
# page of fragments: docs/API.md's "```cpp program"; renderers take the
# first word of the fence as the language).
#
# Snippets mode: a page of fragments, for a compile-only check. OUT includes
# PRELUDE (the page's headers and the names its fragments take as given),
# then each plain ```cpp block (a block whose fence has a tag is left out:
# a program compiled elsewhere, or code for an optional component such as
# "```cpp cuda"; with -DTAG=<word> only the blocks fenced "```cpp <word>",
# for a check built with that component), its #include lines first, its other lines in a function of
# their own, or, when its first line starts with "template" (type
# definitions), in a namespace of their own.
if(NOT DEFINED MODE OR MODE STREQUAL "")
  set(MODE program)
endif()
# The page as a list of lines: ';' and unbalanced '[' ']' (in prose or code)
# would split or join CMake list elements, so they travel as placeholders.
file(READ "${IN}" text)
string(REPLACE ";" "@SEMICOLON@" text "${text}")
string(REPLACE "[" "@LBRACKET@" text "${text}")
string(REPLACE "]" "@RBRACKET@" text "${text}")
string(REPLACE "\\" "@BACKSLASH@" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(code "")
set(includes "")
set(in_block FALSE)
set(count 0)
set(blocks 0)
set(lineno 0)
if(MODE STREQUAL "snippets" AND DEFINED TAG AND NOT TAG STREQUAL "")
  set(open_fence "^ *```cpp ${TAG}$")  # an optional component's blocks (in a list: indented)
elseif(MODE STREQUAL "snippets")
  set(open_fence "^```cpp$")
elseif(DEFINED TAG AND NOT TAG STREQUAL "")
  set(open_fence "^```cpp ${TAG}$")
else()
  set(open_fence "^```cpp")
endif()
foreach(line IN LISTS lines)
  math(EXPR lineno "${lineno} + 1")
  string(REPLACE "@SEMICOLON@" ";" line "${line}")
  string(REPLACE "@LBRACKET@" "[" line "${line}")
  string(REPLACE "@RBRACKET@" "]" line "${line}")
  string(REPLACE "@BACKSLASH@" "\\" line "${line}")
  if(in_block)
    if(line MATCHES "^ *```")
      set(in_block FALSE)
      if(MODE STREQUAL "snippets" AND NOT first_line)
        string(APPEND code "}\n")
      endif()
    elseif(MODE STREQUAL "snippets" AND line MATCHES "^ *#include")
      string(APPEND includes "#line ${lineno} \"${IN}\"\n${line}\n")
    else()
      if(MODE STREQUAL "snippets" AND first_line)
        set(first_line FALSE)
        if(line MATCHES "^template")
          string(APPEND code "namespace docs_snippet_${blocks} {\n#line ${lineno} \"${IN}\"\n")
        else()
          string(APPEND code "[[maybe_unused]] static void docs_snippet_${blocks}() {\n#line ${lineno} \"${IN}\"\n")
        endif()
      endif()
      string(APPEND code "${line}\n")
      math(EXPR count "${count} + 1")
    endif()
  elseif(line MATCHES "${open_fence}")
    set(in_block TRUE)
    set(first_line TRUE)
    math(EXPR blocks "${blocks} + 1")
    math(EXPR first "${lineno} + 1")
    string(APPEND code "#line ${first} \"${IN}\"\n")
  endif()
endforeach()
if(in_block)
  message(FATAL_ERROR "${IN}: a ```cpp block is not closed")
endif()
if(blocks EQUAL 0)
  message(FATAL_ERROR "${IN}: no ```cpp${TAG} block to compile")
endif()
if(MODE STREQUAL "snippets")
  set(code "#include \"${PRELUDE}\"\n${includes}${code}")
elseif(count GREATER MAX_LINES)
  message(FATAL_ERROR "${IN}: its code blocks hold ${count} lines, more than the ${MAX_LINES} the guide may show")
endif()
file(WRITE "${OUT}" "${code}")
message(STATUS "${IN}: ${blocks} code blocks, ${count} lines")

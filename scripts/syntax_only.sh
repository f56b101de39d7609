#!/usr/bin/env bash
# Compiler launcher (-DCMAKE_CXX_COMPILER_LAUNCHER) for a build that only
# checks that the sources compile: runs the compile command with
# -fsyntax-only (parsing, templates instantiated, every diagnostic; no code
# generated) and leaves an empty object file where the command would have
# written one. Link nothing built this way. scripts/test.sh builds the
# examples without the CUDA backend so.
#
# SYNTAX_ONLY_WHEN=<extended regex>: check a source only when it or a file
# it includes matches the regex (the file list from the compiler's -M);
# when none does, say so and skip it. scripts/test.sh sets
# 'CIFARNET_WITH_(CUDA|NCCL)': a source none of whose files tests those
# macros preprocesses to the same text with and without the CUDA backend,
# and the main stage has compiled it. A source whose includes cannot be
# listed (a header that only the CUDA build finds) is checked.
set -euo pipefail
out=
prev=
src=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  [ "$prev" = -c ] && src=$a
  prev=$a
done
if [ -n "${SYNTAX_ONLY_WHEN:-}" ] && [ -n "$src" ]; then
  # The same command without its outputs, listing the included files.
  deps_cmd=()
  skip=
  for a in "$@"; do
    if [ -n "$skip" ]; then
      skip=
      continue
    fi
    case $a in
      -MD | -MMD) continue ;;
      -MT | -MF | -MQ | -o)
        skip=1
        continue
        ;;
    esac
    deps_cmd+=("$a")
  done
  if deps=$("${deps_cmd[@]}" -M 2>/dev/null); then
    mapfile -t files < <(tr -d '\\' <<<"$deps" | tr ' ' '\n' | grep -v ':$' | grep .)
    rc=0
    grep -q -E "$SYNTAX_ONLY_WHEN" -- "${files[@]}" || rc=$?
    if [ "$rc" = 1 ]; then  # read every file, none matches (2: a file unreadable: check)
      echo "syntax_only: skipped $src (none of its ${#files[@]} files matches '$SYNTAX_ONLY_WHEN')"
      if [ -n "$out" ]; then : >"$out"; fi
      exit 0
    fi
  fi
fi
"$@" -fsyntax-only
if [ -n "$out" ]; then : >"$out"; fi

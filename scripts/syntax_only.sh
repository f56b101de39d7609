#!/usr/bin/env bash
# Compiler launcher (-DCMAKE_CXX_COMPILER_LAUNCHER) for a build that only
# checks that the sources compile: runs the compile command with
# -fsyntax-only (parsing, templates instantiated, every diagnostic; no code
# generated) and leaves an empty object file where the command would have
# written one. Link nothing built this way. scripts/test.sh builds the
# examples without the CUDA backend so.
set -euo pipefail
out=
prev=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  prev=$a
done
"$@" -fsyntax-only
if [ -n "$out" ]; then : >"$out"; fi

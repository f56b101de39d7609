#!/usr/bin/env bash
# The compiled mode from an install: cifarnet built with its compiled-mode
# library (cifarnet::compiled) and installed, then the downstream project of
# tests/install/consumer_edit found with find_package(cifarnet COMPONENTS
# compiled), built (its network in network.cpp, declaring the oneDNN ops
# extern) and run: it must link against the installed library and train.
# Usage: run_compiled_consumer.sh <cifarnet-source> <work-dir> [<cifarnet-build-dir>]
# With a build dir (the test suite's own build, whose cifarnet_compiled is
# already built, without sanitizers: tests/install/CMakeLists.txt decides)
# that build is installed, as `cmake --install` of a user's build would be,
# instead of configuring and compiling the library again (38 s of CPU on a
# 2-core EPYC).
set -euo pipefail
src=$1 work=$2 from=${3:-}
rm -rf "$work" && mkdir -p "$work"
if [ -n "$from" ]; then
  [ -f "$from/libcifarnet_compiled.a" ] ||
    { echo "FAIL: $from/libcifarnet_compiled.a is not built (build the target cifarnet_compiled first)"; exit 1; }
  cmake --install "$from" --prefix "$work/prefix" > "$work/install.log"
else
  cmake -S "$src" -B "$work/cifarnet-build" -G Ninja -DCIFARNET_BUILD_TESTS=OFF -DCIFARNET_BUILD_EXAMPLES=OFF \
    -DCIFARNET_BUILD_BENCH=OFF -DCIFARNET_CUDA=OFF -DCIFARNET_COMPILED=ON -DCMAKE_INSTALL_PREFIX="$work/prefix" \
    > "$work/configure.log"
  cmake --build "$work/cifarnet-build" --target cifarnet_compiled > "$work/build.log"
  cmake --install "$work/cifarnet-build" > "$work/install.log"
fi
lib=$(find "$work/prefix" -name 'libcifarnet_compiled.a' | head -1)
[ -n "$lib" ] || { echo "FAIL: libcifarnet_compiled.a not installed"; exit 1; }
grep -q "cifarnet-compiled-targets.cmake" "$work/install.log" || { echo "FAIL: no compiled component file installed"; exit 1; }
# -O1 and no precompiled header: this checks that it links and runs, not its
# build time (bench/edit_rebuild.sh measures that).
cmake -S "$src/tests/install/consumer_edit" -B "$work/app" -G Ninja -DCIFARNET_MODE=find_package \
  -DCONSUMER_COMPILED=ON -DCONSUMER_PCH=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/app-configure.log"
cmake --build "$work/app" > "$work/app-build.log"
# The extern declarations held: the program's own objects define none of the
# library's ops' member functions (they come from libcifarnet_compiled.a);
# only the implicit destructors, which the compiler writes where an op dies.
nm -C "$work/app/CMakeFiles/app.dir/network.cpp.o" | grep -E ' U cifarnet::ops::Conv2d<cifarnet::backend::OneDnn, float>::' \
  > /dev/null || { echo "FAIL: network.cpp.o calls no member of Conv2d<OneDnn> from the library"; exit 1; }
if nm -C "$work/app/CMakeFiles/app.dir/network.cpp.o" | grep -E ' [TW] cifarnet::ops::[A-Za-z0-9]+<cifarnet::backend::OneDnn, float>::' \
  | grep -v '::~'; then
  echo "FAIL: network.cpp.o defines the oneDNN ops' members: the compiled mode's extern templates did not apply"
  exit 1
fi
OMP_NUM_THREADS=1 "$work/app/app"

#!/usr/bin/env bash
# Installs every dependency of cifarnet from Debian packages. Idempotent: safe to
# run again; apt-get skips what is already installed. No other downloads.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN 2.6: CPU primitives
  ocl-icd-opencl-dev opencl-headers # required by Debian's dnnl-config.cmake
  xtensor-dev xtl-dev     # tensors and views
  libxtensor-blas-dev    # xt::linalg (BLAS-backed) for the reference backend
  libeigen3-dev          # mapped contiguous buffers
  libopenblas-dev        # BLAS for xtensor-blas
  catch2                 # Catch2 v2 single header, tests
  libstb-dev             # image I/O (stb_image, stb_image_write, stb_image_resize)
  libmatio-dev           # MATLAB .mat reader (VGG-19 weights)
  libopenmpi-dev openmpi-bin # data-parallel training
  libcli11-dev           # command-line flags in the examples
  nlohmann-json3-dev     # safetensors headers, configs
  clang                  # the sanitizer (ASan+UBSan) and libFuzzer builds
  libcurl4-openssl-dev   # --download: fetch the CIFAR-10 tarball (cifarnet::download)
  libarchive-dev         # --download: unpack it
  libssl-dev             # --download: its MD5 (OpenSSL libcrypto EVP)
  libomp-dev             # OpenMP runtime for clang builds (sanitizers, fuzzing)
  clang-format
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PKGS[@]}"

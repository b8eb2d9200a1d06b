#!/usr/bin/env bash
# Installs the Debian packages ZeRO.cpp builds and tests with (docs/building.md lists them and why).
# Idempotent: when every package is already present it does nothing, so it also works offline.
# Usage: tools/install_deps.sh [--with-torch]   (--with-torch adds python3-torch, only needed to
# regenerate the PyTorch golden fixtures under tools/golden/; CI does not need it).
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache clang clang-format lld
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  openmpi-bin libopenmpi-dev
  liburing-dev libaio-dev
  libopenblas-openmp-dev libdnnl-dev libhwloc-dev libnuma-dev libhwy-dev libxxhash-dev
  libpcre2-dev libicu-dev libsentencepiece-dev
  libclang-rt-14-dev
  python3-dev python3-numpy
  fio iproute2
)
if [[ "${1:-}" == "--with-torch" ]]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

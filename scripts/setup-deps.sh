#!/usr/bin/env bash
# Install the system packages dcgan-train needs, only those missing (Debian/Ubuntu, as root
# or with sudo): Open MPI and libclang (the mpi crate's bindings), the Fashion-MNIST package,
# pkg-config, iproute2 (ip and tc, for the emulated cluster); with --tests also python3 with
# pip where python3 has none (the report scripts the tests run are Python, and pip fetches
# NVRTC). Safe to run again: it does nothing when everything is there.
#   scripts/setup-deps.sh [--tests]
set -euo pipefail

packages=(openmpi-bin libopenmpi-dev libclang-dev pkg-config dataset-fashion-mnist iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Any python3 with pip will do (a pyenv or conda one too): Debian's only when there is none.
if [ "${1:-}" = --tests ] && ! "${PYTHON:-python3}" -m pip --version >/dev/null 2>&1; then
  missing+=(python3 python3-pip)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "missing packages ${missing[*]} and no apt-get: install them with your package manager" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "installing ${missing[*]} needs root: run as root or install sudo" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "no Rust toolchain: install it from https://rustup.rs (curl ... | sh), then run this again" >&2
    exit 1
  fi
fi

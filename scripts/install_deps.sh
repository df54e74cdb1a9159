#!/usr/bin/env bash
# Installs everything horovod_cpp needs to build, test and run its examples on Debian 12
# (run as root). The CUDA toolkit and NCCL are used when present under /usr/local/cuda.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake git pkg-config \
  libopenmpi-dev openmpi-bin libgloo-dev \
  catch2 pybind11-dev nlohmann-json3-dev libcli11-dev \
  python3 python3-dev python3-venv python3-pip python3-numpy python3-pytest python3-matplotlib \
  python3-cloudpickle python3-yaml python3-mpi4py \
  libtorch-dev python3-torch zlib1g-dev \
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
# TensorFlow 2 / Keras 3 in their own virtual environment (horovod_cpp.tensorflow, .keras).
bash "$(dirname "$0")/install_tf_env.sh"
# Ray in its own virtual environment (horovod_cpp.ray, test/ray).
bash "$(dirname "$0")/install_ray_env.sh"

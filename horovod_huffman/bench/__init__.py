"""Benchmarks: ``python -m horovod_huffman.bench --help``."""

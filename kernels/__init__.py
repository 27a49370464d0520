"""Framework-free Numba kernels, installed as ``horovod_huffman.kernels``.

Modules: bits (MSB-first bit I/O), huffman (code construction), codebook (canonical codebook on
the wire), symbols (per-element Huffman), runs (run-length tokens), vector_runs (AVX-512 run
pass for rlh), elias (Elias codes), fixed (fixed-width packing), stats and estimate (sizing for
``auto``), quantize (QSGD, TernGrad), squares (the QSGD bucket norm's vector sum), maxima
(every stream and table maximum and the packed layouts sized for them), errors
(decode status codes). Every kernel compiles with ``cache=True``.
"""

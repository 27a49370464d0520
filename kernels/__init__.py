"""Framework-free Numba kernels, installed as ``horovod_huffman.kernels``. Every kernel compiles
with ``cache=True``.

Limits: maxima (every stream and table maximum, and the packed layouts sized for them), errors
(decode status codes).
Bits: bits (MSB-first bit I/O, the reader's 64-bit buffer), stores (multi-level loads and
stores, byte swaps), varints (LEB128 parameter fields), chunks (chunked payloads).
Codes: huffman (code lengths and canonical codes, decode tables), codebook (the codebook on the
wire), elias (Elias codes), fixed (fixed-width packing).
Encoders: symbols (per-element Huffman: histograms, writer, multi-symbol decode tables), runs
(rlh/shs tokens: run ends, histograms, writers), vector_runs (AVX-512 run pass for rlh), tokens
(token tables and the token decoder), lanes (the four-lane driver of both table decoders), ans
(rANS: normalized frequencies, coder tables, the chunk coder), ans_tokens (rla: rlh's tokens
rANS-coded under contexts, their run bits), stats and estimate (sizing for ``auto``).
Quantizers: quantize (QSGD, TernGrad, dequantization), squares (the QSGD bucket norm's vector
sum).
GPU: cuda_bits, cuda_decode, cuda_tokens, cuda_ans, cuda_rla, cuda_quantize, cuda_feedback (the
same formats and results on the device).
"""

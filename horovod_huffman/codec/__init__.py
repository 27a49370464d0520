"""The codec: quantized levels in, bytes out, and back.

- ``quantizers``: float gradients to integer levels and per-bucket scales (QSGD, TernGrad).
- ``encoders``: every encoder by name, and ``decode`` for any of their streams.
- ``wire`` and ``params``: the framing of one level stream and its encoder's parameters.
- ``message``: one message per quantized tensor (shape, dtype, scales, the level stream).
- ``errors``: ``DecodeError``, which every decoder raises on bad input.
- ``device`` and ``dlpack``: GPU arrays, and viewing framework tensors as them.
- ``scratch``: host buffers an encode or decode borrows.

Nothing here knows about ranks or collectives; ``horovod_huffman.exchange`` builds on it.
"""

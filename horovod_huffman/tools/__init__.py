"""Tooling around the package: ``python -m horovod_huffman.tools.compile`` (Numba's cache, ahead
of training), ``python -m horovod_huffman.tools.bench`` (sizes and speeds) and
``python -m horovod_huffman.tools.fuzz`` (decoders on hostile streams), with ``watchdog``, a time
limit for code that may never return."""

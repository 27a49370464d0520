"""The exchange: reducing a bucket of gradients across ranks through the codec, over any
collectives.

- ``buckets``: which gradients travel together, and where each one sits in its bucket.
- ``frames``: what a rank sends (a frame around a message), checked on receipt.
- ``codec_state``: ``Codec``, a codec with each key's steps, statistics, error feedback
  (``feedback``) and ``auto``'s choices (``statistics``).
- ``allreduce``: the exchanges (allgather, two-phase, reduce-scatter), written against a small
  collectives interface; ``local`` runs them on in-process ranks.
- ``array_ops``: their array steps, for host and GPU arrays; on a GPU the encodes and the
  sums of the exchanges a driver holds run together (``encode_queue``, ``rank_sums``).
- ``pipeline`` and ``routing``: exchanges off the training thread, and adaptive routing.

The framework adapters (``horovod_huffman.torch``, ``horovod_huffman.tensorflow``) supply the
collectives and the gradients; nothing here imports a framework.
"""
from .codec_state import Codec
from .frames import MismatchError

__all__ = ["Codec", "MismatchError"]

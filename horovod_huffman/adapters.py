"""What the framework adapters share besides the exchange core: building a codec from user
arguments, which gradients skip the codec, the ``Compression.<encoder>`` attributes, and the
statistics methods.

The bfloat16 policy, the same in both adapters: Horovod 0.28's own collectives reject
bfloat16, so a bfloat16 gradient that rides Horovod's allreduce (``sent_uncompressed``, or a
dense route) is sent as float32 and cast back; one that is encoded is staged as float32.
"""
from .codec.encoders import as_encoder
from .exchange.codec_state import Codec
from .codec.quantizers import QSGD


def make_codec(encoder="rlh", quantizer=None, error_feedback=None, seed=None, **encoder_kwargs):
    """A Codec: ``encoder`` is a name from ENCODERS (``encoder_kwargs`` go to it) or an Encoder;
    ``quantizer`` defaults to QSGD(levels=8)."""
    return Codec(encoder=as_encoder(encoder, **encoder_kwargs),
                 quantizer=quantizer or QSGD(levels=8), error_feedback=error_feedback, seed=seed)


def sent_uncompressed(numel, floating, min_numel):
    """Whether a gradient skips the codec and rides Horovod's allreduce as it is: not floating
    point, of unknown size (``numel`` None), or fewer than ``min_numel`` (at least 1)
    elements."""
    return not floating or numel is None or numel < max(min_numel, 1)


class ReadyCompressor:
    """``Compression.<encoder>``: a fresh compressor at every access (``owner.build``), so no
    state is shared between optimizers."""

    def __init__(self, encoder):
        self.encoder = encoder

    def __get__(self, obj, owner):
        return owner.build(encoder=self.encoder)


class ReadyCompressors:
    """Base of both adapters' ``Compression`` namespaces: one ready compressor per encoder in
    ``ENCODERS`` (QSGD s = 8 followed by that encoder), written out so that editors and type
    checkers see them; tests/test_adapters.py checks the list against ENCODERS. A subclass
    provides ``build(encoder=...)``."""
    huffman = ReadyCompressor("huffman")
    rlh = ReadyCompressor("rlh")
    sh = ReadyCompressor("sh")
    shs = ReadyCompressor("shs")
    elias_gamma = ReadyCompressor("elias_gamma")
    elias_delta = ReadyCompressor("elias_delta")
    elias_omega = ReadyCompressor("elias_omega")
    elias_rle = ReadyCompressor("elias_rle")
    qsgd_elias = ReadyCompressor("qsgd_elias")
    raw = ReadyCompressor("raw")
    ans = ReadyCompressor("ans")
    rla = ReadyCompressor("rla")
    auto = ReadyCompressor("auto")


class CodecStats:
    """``stats()`` and ``end_step()`` of a compressor holding ``self.codec``."""

    def stats(self):
        """Bytes, bits per coordinate and times of this rank's last step, current step and all
        steps (``Codec.stats``)."""
        return self.codec.statistics.summary()

    def end_step(self):
        """Close the statistics of the current step (also done when the next step starts)."""
        return self.codec.statistics.end_step().as_dict()

"""What the framework adapters share besides the exchange core: building a codec from user
arguments, the ``Compression.<encoder>`` attributes, and the statistics methods."""
from .encoders import ENCODERS, get_encoder
from .exchange import Codec
from .quantizers import QSGD


def make_codec(encoder="rlh", quantizer=None, error_feedback=None, seed=None, **encoder_kwargs):
    """A Codec: ``encoder`` is a name from ENCODERS (``encoder_kwargs`` go to it) or an Encoder;
    ``quantizer`` defaults to QSGD(levels=8)."""
    enc = get_encoder(encoder, **encoder_kwargs) if isinstance(encoder, str) else encoder
    return Codec(encoder=enc, quantizer=quantizer or QSGD(levels=8),
                 error_feedback=error_feedback, seed=seed)


class ReadyCompressor:
    """``Compression.<encoder>``: a fresh compressor at every access (``owner.build``), so no
    state is shared between optimizers."""

    def __init__(self, encoder):
        self.encoder = encoder

    def __get__(self, obj, owner):
        return owner.build(encoder=self.encoder)


def add_ready_compressors(compression_class):
    """Give a ``Compression`` namespace one ready compressor per encoder name."""
    for name in ENCODERS:
        setattr(compression_class, name, ReadyCompressor(name))
    return compression_class


class CodecStats:
    """``stats()`` and ``end_step()`` of a compressor holding ``self.codec``."""

    def stats(self):
        """Bytes, bits per coordinate and times of this rank's last step, current step and all
        steps (``Codec.stats``)."""
        return self.codec.stats()

    def end_step(self):
        """Close the statistics of the current step (also done when the next step starts)."""
        return self.codec.end_step().as_dict()

"""What both framework adapters share (adapters.py): the ready ``Compression.<encoder>``
attributes, one per encoder, and the gradients that skip the codec."""
import horovod_huffman as hh
from horovod_huffman.adapters import ReadyCompressor, ReadyCompressors, sent_uncompressed


def test_a_ready_compressor_is_written_out_for_every_encoder():
    ready = [name for name, value in vars(ReadyCompressors).items()
             if isinstance(value, ReadyCompressor)]
    assert ready == list(hh.ENCODERS), "add the new encoder to adapters.ReadyCompressors"
    assert all(vars(ReadyCompressors)[name].encoder == name for name in ready)


def test_each_access_builds_a_fresh_compressor():
    class Compression(ReadyCompressors):
        @staticmethod
        def build(encoder):
            return [encoder]

    first, second = Compression.rlh, Compression.rlh
    assert first == second == ["rlh"] and first is not second


def test_small_and_non_float_gradients_skip_the_codec():
    assert sent_uncompressed(10, True, 100) and sent_uncompressed(1000, False, 100)
    assert sent_uncompressed(None, True, 100) and sent_uncompressed(0, True, 0)
    assert not sent_uncompressed(100, True, 100)

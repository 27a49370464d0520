"""An encoder standing for a faulty link or peer, shared by the fault workers."""
import horovod_huffman as hh


class CorruptingRLH(hh.Encoder):
    """rlh, with one payload byte flipped after encoding."""
    name, encoder_id = "rlh", hh.get_encoder("rlh").encoder_id

    def encode(self, levels):
        buf = hh.get_encoder("rlh").encode(levels).copy()
        buf[len(buf) // 2] ^= 0x5A
        return buf

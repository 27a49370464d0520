"""The codec's command-line options, shared by the PyTorch examples (Horovod's and DDP's)."""
import horovod_huffman as hh


def add_codec_options(parser):
    """QSGD's levels and bucket size, error feedback and the exchange."""
    parser.add_argument("--levels", type=int, default=8, help="QSGD levels s")
    parser.add_argument("--bucket-size", type=int, default=512)
    parser.add_argument("--error-feedback", action="store_true",
                        help="error feedback on (default: only for biased quantizers; QSGD is "
                             "unbiased)")
    parser.add_argument("--exchange", choices=["auto", "allgather", "two_phase"], default="auto",
                        help="compressed allreduce: one-phase allgather, or two-phase "
                             "reduce-scatter + allgather (auto: allgather up to 3 ranks, "
                             "two-phase from 4)")


def quantizer(args):
    """The QSGD quantizer the options name."""
    return hh.QSGD(levels=args.levels, bucket_size=args.bucket_size)

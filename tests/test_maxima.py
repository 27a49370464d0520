"""kernels/maxima.py holds every stream and table maximum once: the tables built elsewhere stay
within them (its own import-time assertions check the packed fields)."""
import numpy as np

from horovod_huffman.kernels import maxima, runs
from horovod_huffman.kernels.elias import ELIAS_TABLES


def test_run_buckets_and_their_extra_bits_stay_within_the_maxima():
    assert len(runs.BUCKET_EXTRA) == maxima.RUN_BUCKETS
    assert max(runs.BUCKET_EXTRA) == maxima.MAX_RUN_EXTRA_BITS
    assert runs.bucket_and_extra(np.uint64(maxima.MAX_RUN), False)[0] == maxima.RUN_BUCKETS - 1


def test_elias_prefix_tables_hold_their_lengths_in_a_length_entry():
    lengths = ELIAS_TABLES & maxima.LENGTH_MASK
    assert lengths.max() <= maxima.MAX_CODE_BITS and lengths.min() == 0

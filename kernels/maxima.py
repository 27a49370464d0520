"""Every maximum a stream or a table may reach, and the packed layouts sized for them, in one
place (as zstd's huf.h keeps HUF_TABLELOG_MAX and its kin). The assertions at the end check at
import that every packed field holds its maximum, so widening a maximum cannot silently
truncate a field.

Units are in the names: ``_BITS`` counts bits, ``_LEVELS`` levels, ``_BYTES`` bytes. In a
layout, a ``_SHIFT`` is where a field starts in its word and a ``_MASK`` is the field's mask
once shifted down.
"""

# ---- Maxima ---------------------------------------------------------------------------------

# Longest Huffman code. 12 bits: a 4096-entry decode table (16 KiB of uint32) stays in L1, and
# 4096 codes are more than any quantizer here needs (QSGD s = 127 has 255 levels).
MAX_CODE_BITS = 12
# Entries of a decode table: one per MAX_CODE_BITS-bit prefix.
TABLE_SIZE = 1 << MAX_CODE_BITS
# Most symbols that get a code: a full 12-bit code space holds exactly 4096.
MAX_CODED_SYMBOLS = TABLE_SIZE
# Longest run one token carries (rlh, shs, elias_rle); longer runs are split.
MAX_RUN = (1 << 32) - 1
# Run-length buckets of rlh: runs 1..3, then two per octave for bit lengths 3..32: 3 + 2 * 30.
RUN_BUCKETS = 63
# Most extra bits a run bucket takes (runs.BUCKET_EXTRA: a 32-bit run's bits below its top two).
MAX_RUN_EXTRA_BITS = 30
# Longest value bit length any Elias decoder accepts: runs and gaps are below MAX_ELEMENTS
# (2**40), coded with an offset of 1. elias_rle splits runs at MAX_RUN.
MAX_ELIAS_VALUE_BITS = 41
# Most levels one table lookup writes (the lookup tables' counts are bytes).
MAX_LOOKUP_LEVELS = 255
# Longest LEB128 varint; a longer one is forged: 10 bytes hold 70 bits, more than a uint64.
MAX_VARINT_BYTES = 10
# Most symbols a codebook's alphabet may have (levels and run tokens, the escape included).
MAX_SYMBOLS = 1 << 17
# Levels huffman/sh code directly span at most this many values; others take the escape.
HUFFMAN_MAX_WINDOW = 1 << 16
# rlh: window * RUN_BUCKETS + 1 symbols must stay within MAX_SYMBOLS.
RLH_MAX_WINDOW = (MAX_SYMBOLS - 1) // RUN_BUCKETS
# shs: runs of up to k zeros get codes; k may not exceed this, leaving room in the 4096 codes
# for the non-zero levels.
SHS_MAX_K = 2048
# An escaped rlh token: code, raw level, and a gamma-coded run of at most 2 * 32 - 1 bits.
RLH_ESCAPE_RUN_BITS = 63
# Most elements a stream header may declare (horovod_huffman/codec/wire.py), and the largest
# parameter block (codebooks are a few KiB; a larger block is forged).
MAX_ELEMENTS = 1 << 40
MAX_PARAM_BYTES = 1 << 20
# Most dimensions of a tensor message (horovod_huffman/codec/message.py; its ndim is one byte).
MAX_NDIM = 32
# ANS (kernels/ans.py): symbol probabilities are multiples of 2**-ANS_PROB_BITS, so a decode
# table has 2**ANS_PROB_BITS entries (32 KiB of uint64: L1-resident) and at most that many
# symbols can occur; the window of levels coded directly spans at most ANS_MAX_WINDOW values.
ANS_PROB_BITS = 12
ANS_PROB_SCALE = 1 << ANS_PROB_BITS
ANS_MAX_WINDOW = ANS_PROB_SCALE - 1
# Most classes of blocks with their own ANS frequencies (a block's class is a uint8).
ANS_MAX_CLASSES = 8
# A context block holds at most 2**ANS_MAX_BLOCK_BITS levels (as many as a stream may declare;
# a block must also divide the chunk size, which the decoder checks).
ANS_MAX_BLOCK_BITS = 40
# Widest field of a ``raw`` stream (bits per level: any int32 level fits).
RAW_MAX_WIDTH = 32

# ---- Packed layouts -------------------------------------------------------------------------

# A length entry: a value (a symbol in Huffman decode tables, a code in encoder entries, a
# decoded value in Elias prefix tables) above its code length in bits:
#     value << LENGTH_BITS | length          (length 0: no code; an escape in encoder entries)
LENGTH_BITS = 4
LENGTH_MASK = (1 << LENGTH_BITS) - 1

# A code length on the wire (kernels/codebook.py): CODEBOOK_LENGTH_BITS bits.
CODEBOOK_LENGTH_BITS = 4

# A writer entry (runs.writer_entries, uint64): what rlh's hot loop writes for a token:
#     code << WRITER_CODE_SHIFT | extra bits << WRITER_EXTRA_SHIFT | code and extra bits
WRITER_CODE_SHIFT = 16
WRITER_EXTRA_SHIFT = 8
WRITER_FIELD_MASK = 0xFF            # the extra-bits and total-bits fields
WRITER_MAX_BITS = 32                # longer tokens take the writer's slow path (entry 0)

# A plain entry (runs.plain_entries, uint64): a token without extra bits (runs 1..3):
#     code << PLAIN_CODE_SHIFT | length;   PLAIN_NONE (a length no pair of codes fits) otherwise
PLAIN_CODE_SHIFT = 8
PLAIN_LENGTH_MASK = 0xFF
PLAIN_NONE = 0xFF

# A token table entry (tokens.token_table, uint64): the code's length, the escape flag, the
# token's extra bits (its run bucket's), its run's base, its level index in the window on top:
#     level << TOKEN_LEVEL_SHIFT | run << TOKEN_RUN_SHIFT | extra << TOKEN_EXTRA_SHIFT
#     | TOKEN_ESCAPE | length
TOKEN_LENGTH_MASK = LENGTH_MASK
TOKEN_ESCAPE = 1 << LENGTH_BITS
TOKEN_EXTRA_SHIFT = LENGTH_BITS + 1
TOKEN_EXTRA_MASK = 0x3F
TOKEN_RUN_SHIFT = 11
TOKEN_RUN_MASK = 0xFFFFFFFF
TOKEN_LEVEL_SHIFT = 43

# An ANS decode entry (ans.decode_table, uint64), one per slot of the probability scale: the
# slot's symbol's frequency, the slot's offset within the symbol's slots, the escape flag, and
# the symbol's level (int32 as its two's complement) on top:
#     level << ANS_LEVEL_SHIFT | ANS_ESCAPE | offset << ANS_OFFSET_SHIFT | frequency
ANS_FREQ_MASK = 0x1FFF
ANS_OFFSET_SHIFT = 13
ANS_OFFSET_MASK = 0xFFF
ANS_ESCAPE = 1 << 25
ANS_LEVEL_SHIFT = 32
# An ANS encode entry (ans.encode_tables, uint64): what coding a symbol of frequency f adds to a
# state x (x + bias + q * complement, q = x // f; ``rcp`` gives q), and the bound f << (31 -
# ANS_PROB_BITS) from which x renormalizes first (ans.py, note 2):
#     bias << ANS_BIAS_SHIFT | complement << ANS_COMPLEMENT_SHIFT | bound
ANS_BOUND_MASK = 0xFFFFFFFF
ANS_COMPLEMENT_SHIFT = 32
ANS_BIAS_SHIFT = 45
# The encoder's reciprocal of a frequency f (kernels/ans.py encode_tables), one uint64:
#     shift << ANS_RECIPROCAL_BITS | rcp,   x // f == ((x * rcp) >> ANS_RECIPROCAL_BITS) >> shift
# for every state x < 2**31: a 32-bit rcp, so x * rcp stays below 2**63.
ANS_RECIPROCAL_BITS = 32
ANS_RECIPROCAL_MASK = (1 << ANS_RECIPROCAL_BITS) - 1
# ``rla`` (kernels/ans_tokens.py): a token decode entry is an ANS decode entry whose level field
# holds the token's run bucket and level index:
#     bucket << ANS_TOKEN_BUCKET_SHIFT | level index
# and, with two contexts, ANS_TOKEN_ANCHOR set on the anchor's tokens (the next token's
# context is 1 where it is set: ans_tokens.py, note 5).
ANS_TOKEN_BUCKET_SHIFT = 16
ANS_TOKEN_INDEX_MASK = 0xFFFF
ANS_TOKEN_ANCHOR = 1 << 26
# Most distinct token symbols an ``rla`` table codes: the rarer ones take the escape.
ANS_MAX_TOKENS = ANS_PROB_SCALE // 2


def _fits(maximum, mask):
    return 0 <= maximum <= mask


assert _fits(MAX_CODE_BITS, LENGTH_MASK), "a code length must fit a length entry"
assert _fits(MAX_CODE_BITS, (1 << CODEBOOK_LENGTH_BITS) - 1), "a code length must fit the wire"
assert MAX_CODED_SYMBOLS <= TABLE_SIZE, "Kraft: at most 2**MAX_CODE_BITS codes"
assert _fits(MAX_CODE_BITS + MAX_RUN_EXTRA_BITS, WRITER_FIELD_MASK)
assert _fits(WRITER_MAX_BITS, WRITER_FIELD_MASK)
assert PLAIN_NONE > 63 and _fits(PLAIN_NONE, PLAIN_LENGTH_MASK), "no pair fits the accumulator"
assert PLAIN_CODE_SHIFT >= PLAIN_LENGTH_MASK.bit_length()
assert WRITER_CODE_SHIFT >= WRITER_EXTRA_SHIFT + WRITER_FIELD_MASK.bit_length()
assert WRITER_CODE_SHIFT + MAX_CODE_BITS <= 64, "a writer entry's code must fit 64 bits"
assert _fits(MAX_RUN_EXTRA_BITS, TOKEN_EXTRA_MASK), "a run's extra bits must fit a token entry"
assert TOKEN_EXTRA_SHIFT > LENGTH_BITS and TOKEN_RUN_SHIFT >= \
    TOKEN_EXTRA_SHIFT + TOKEN_EXTRA_MASK.bit_length()
assert _fits(MAX_RUN, TOKEN_RUN_MASK), "a run must fit a token entry"
assert TOKEN_LEVEL_SHIFT >= TOKEN_RUN_SHIFT + TOKEN_RUN_MASK.bit_length()
assert RLH_MAX_WINDOW <= 1 << (64 - TOKEN_LEVEL_SHIFT), "a level index must fit a token entry"
assert RLH_MAX_WINDOW * RUN_BUCKETS + 1 <= MAX_SYMBOLS and SHS_MAX_K < MAX_CODED_SYMBOLS
assert RLH_ESCAPE_RUN_BITS >= 2 * MAX_RUN.bit_length() - 1, "gamma of a run of MAX_RUN"
assert _fits(MAX_LOOKUP_LEVELS, 0xFF), "lookup counts are bytes"
assert MAX_VARINT_BYTES * 7 >= 64
assert MAX_ELIAS_VALUE_BITS >= MAX_ELEMENTS.bit_length() and MAX_ELIAS_VALUE_BITS <= 64
assert _fits(ANS_PROB_SCALE, ANS_FREQ_MASK), "a frequency of the whole scale must fit"
assert _fits(ANS_PROB_SCALE - 1, ANS_OFFSET_MASK), "a slot offset must fit"
assert ANS_OFFSET_SHIFT == ANS_FREQ_MASK.bit_length() and \
    ANS_ESCAPE >= 1 << (ANS_OFFSET_SHIFT + ANS_OFFSET_MASK.bit_length())
assert ANS_LEVEL_SHIFT > ANS_ESCAPE.bit_length() - 1 and ANS_LEVEL_SHIFT + 32 <= 64
assert ANS_ESCAPE < ANS_TOKEN_ANCHOR < 1 << ANS_LEVEL_SHIFT, "the anchor flag is a free bit"
assert ANS_COMPLEMENT_SHIFT >= ANS_BOUND_MASK.bit_length() >= 32 and \
    ANS_BIAS_SHIFT >= ANS_COMPLEMENT_SHIFT + ANS_FREQ_MASK.bit_length() and \
    ANS_BIAS_SHIFT + (2 * ANS_PROB_SCALE).bit_length() <= 64, "an encode entry's fields fit"
assert 2 * ANS_PROB_SCALE < 1 << 32, "a bias (< 2 * scale) must fit its field"
assert ANS_RECIPROCAL_BITS + ANS_PROB_BITS.bit_length() <= 64 and \
    (1 << 31) * ANS_RECIPROCAL_MASK < 1 << 63, "a reciprocal's shift and x * rcp must fit"
assert ANS_MAX_WINDOW + 1 <= ANS_PROB_SCALE, "every symbol, the escape included, needs a slot"
assert 2 <= ANS_MAX_CLASSES <= 256, "a block's class is a uint8"
assert 1 << ANS_MAX_BLOCK_BITS == MAX_ELEMENTS, "no block is longer than a stream"
assert MAX_NDIM < 1 << 8, "a message's ndim is one byte"
assert _fits(RLH_MAX_WINDOW - 1, ANS_TOKEN_INDEX_MASK) and \
    ANS_TOKEN_BUCKET_SHIFT >= ANS_TOKEN_INDEX_MASK.bit_length() and \
    (RUN_BUCKETS - 1) << ANS_TOKEN_BUCKET_SHIFT < 1 << 31, "a token must fit a level field"
assert ANS_MAX_TOKENS + 1 <= ANS_PROB_SCALE, "every token symbol, the escape included, needs a slot"

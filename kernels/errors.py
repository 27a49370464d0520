"""Status codes that decode kernels return instead of raising (Numba cannot raise rich errors
cheaply). 0 means success; each negative code has one message, looked up by the Python layer."""

OK = 0
PAYLOAD_OVERRUN = -1      # a read went past the declared payload bit length
INVALID_CODE = -2         # bit pattern that starts no code of the codebook
RUN_OVERFLOW = -3         # a run would write past the declared element count
VALUE_OVERFLOW = -4       # a decoded level does not fit the declared level dtype
PAYLOAD_UNDERRUN = -5     # the elements were decoded but payload bits are left over
BAD_ELIAS = -6            # an Elias code longer than any valid value
BAD_CODEBOOK = -7         # codebook symbol id, gap or length out of range
BAD_STATE = -8            # an ANS state out of its range, or not back at its start at the end
ESCAPE_MISMATCH = -9      # ANS escapes decoded differ from the escaped values declared

MESSAGES = {
    PAYLOAD_OVERRUN: "payload truncated: decoding needs more bits than the header declares",
    INVALID_CODE: "payload corrupt: bit pattern is not a code of the codebook",
    RUN_OVERFLOW: "payload corrupt: a run extends past the declared element count",
    VALUE_OVERFLOW: "payload corrupt: decoded level does not fit the declared dtype",
    PAYLOAD_UNDERRUN: "payload corrupt: bits left over after the declared element count",
    BAD_ELIAS: "payload corrupt: Elias code exceeds the largest valid value",
    BAD_CODEBOOK: "codebook corrupt: symbol id or code length out of range",
    BAD_STATE: "payload corrupt: an ANS state is out of range or does not end where it began",
    ESCAPE_MISMATCH: "payload corrupt: escaped levels decoded differ from the escapes declared",
}

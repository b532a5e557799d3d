"""The safetensors format's constants, shared by the header readers (huggingface/safetensors)."""
from __future__ import annotations

# Bits per element of every dtype the safetensors format names.
DTYPE_BITS: dict[str, int] = {
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

# The format's own limit on the JSON header (safetensors refuses larger ones too).
MAX_HEADER_BYTES = 100_000_000
# Element counts and byte offsets must fit a signed 64-bit integer (what every loader indexes with).
MAX_COUNT = 2**63 - 1
METADATA_KEY = "__metadata__"

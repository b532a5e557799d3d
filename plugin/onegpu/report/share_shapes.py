"""Pure: the allow-list's primitives for summary-share.md: the shapes an identifier must have to be shared, and
numbers formatted only when they are numbers. Anything else becomes the withheld marker or 'unknown'."""
from __future__ import annotations

import math
import re

from onegpu.core.units import gib as units_gib

WITHHELD = "(withheld: not on the allow-list)"
SHAPES = {
    "model_id": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?$"),
    "revision": re.compile(r"^[0-9a-f]{40}$"),
    "image_id": re.compile(r"^sha256:[0-9a-f]{64}$"),
    "sha256": re.compile(r"^[0-9a-f]{64}$"),
    "version": re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,39}$"),
    "gpu_name": re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,79}$"),
    "word": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"),  # architectures, dtypes, quant methods
    "code": re.compile(r"^[A-Z][A-Z0-9_]{1,40}$|^HTTP [0-9]{3}$|^NO RECORD \(never sent\)$"),
    "test": re.compile(r"^test_[A-Za-z0-9_]{1,150}$"),
    "headline": re.compile(r"^[A-Z][A-Z0-9 ,'()/-]{2,119}$"),
    "protocol": re.compile(r"^[0-9]{1,2}-GPU protocol \(TP [0-9]{1,2} x PP [0-9]{1,2}\)$"),  # settings.protocol
    "run_id": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"),  # a run folder's own name, never its path
    # The operator's own words in their score file (benchmark, metric, scorer): short, and a slash only as " / "
    # between words (checked with those removed), so no path passes.
    "score_text": re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._,:;()+=%-]{0,79}$"),
}


def shaped(kind: str, value) -> str:
    """The value when it has the expected shape, 'none' when absent, else the withheld marker."""
    if value is None:
        return "none"
    plain = value.replace(" / ", " ") if kind == "score_text" and isinstance(value, str) else value
    return value if isinstance(value, str) and SHAPES[kind].fullmatch(plain) else WITHHELD


def finite(value) -> float | int | None:
    """A finite int or float as it is; None for anything else (booleans, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def gib(value) -> str:
    """Bytes as GiB with two decimals; 'unknown' for anything but a number."""
    return units_gib(finite(value))


def number(value, unit: str = "", digits: int = 2) -> str:
    """A number with separators and its unit; 'unknown' for anything but a number."""
    v = finite(value)
    if v is None:
        return "unknown"
    text = f"{v:,}" if isinstance(v, int) else f"{v:,.{digits}f}"
    return f"{text}{unit}"

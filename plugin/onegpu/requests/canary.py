"""Pure: the canary, a LOAD SMOKE CHECK (never a benchmark): the shipped template and the needle generator.

The template's body.model is a placeholder filled from the settings at approval time; the filled file is the
only request body the kit ever writes. The needle request hides one fact (a code word) in deterministic
filler text at a chosen depth; the checker looks for it in the reply. Same seed, same bytes.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from msgspec import Struct

from onegpu.core.jsonable import to_json
from onegpu.core.units import MIB
from onegpu.requests.requests_file import CHAT_URL

TEMPLATE_PATH = Path(__file__).with_name("data") / "default-canary.template.jsonl"
MODEL_PLACEHOLDER = b'"@@SERVED_MODEL_ID@@"'
LABEL = "LOAD SMOKE CHECK, not a benchmark: UNSCORED"

NEEDLE_MIN_CHARS = 300
NEEDLE_MAX_CHARS = 8 * MIB  # far below the 16 MiB line limit, JSON escapes included
NEEDLE_MAX_TOKENS = 64
CHARS_PER_TOKEN = 4  # a rough English average, used only to say "about N tokens"
QUESTION = ("\n\nQuestion: what is the secret code word stated in the text above? Reply with the code word "
            "only.")

# Filler vocabulary: lowercase words without digits, so the code word (capitals and digits) cannot occur
# in the filler by chance.
_ADJECTIVES = ("quiet", "amber", "distant", "narrow", "patient", "silver", "crooked", "gentle", "hollow",
               "restless", "pale", "steady", "woven", "bright", "muddy", "ancient")
_NOUNS = ("river", "lantern", "orchard", "harbor", "meadow", "cartwright", "library", "bridge", "falcon",
          "granary", "weaver", "lighthouse", "valley", "market", "chapel", "ferry")
_VERBS = ("follows", "remembers", "crosses", "watches", "shelters", "outlasts", "greets", "circles",
          "measures", "forgets")
_PREPOSITIONS = ("beyond", "beneath", "beside", "toward", "across", "behind")


def default_template() -> bytes:
    """The shipped canary template's bytes."""
    return TEMPLATE_PATH.read_bytes()


def fill_template(template: bytes, model_id: str) -> bytes:
    """The template with every line's body.model set to `model_id`; raises ValueError for a broken template."""
    lines = template.splitlines(keepends=True)
    if not lines or any(line.count(MODEL_PLACEHOLDER) != 1 for line in lines):
        raise ValueError("canary template: every line must hold the model placeholder exactly once")
    return template.replace(MODEL_PLACEHOLDER, json.dumps(model_id).encode())


class Needle(Struct, frozen=True):
    """Where the fact was planted and what it is."""

    seed: int
    total_chars: int  # length of the user message, question included
    depth_asked: float  # 0 = start of the filler, 1 = its end
    depth_actual: float  # filler before the fact / all filler (planted at the nearest sentence boundary)
    code_word: str
    custom_id: str
    max_tokens: int

    @property
    def approx_tokens(self) -> int:
        return self.total_chars // CHARS_PER_TOKEN

    def as_json(self) -> dict:
        return {**to_json(self), "approx_tokens": self.approx_tokens, "label": LABEL}


def _filler(rng: random.Random, n_chars: int) -> str:
    """Exactly n_chars of deterministic filler sentences."""
    parts, size = [], 0
    while size < n_chars:
        a1, a2 = rng.choice(_ADJECTIVES), rng.choice(_ADJECTIVES)
        n1, n2 = rng.choice(_NOUNS), rng.choice(_NOUNS)
        sentence = f"The {a1} {n1} {rng.choice(_VERBS)} {rng.choice(_PREPOSITIONS)} the {a2} {n2}. "
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:n_chars]


def needle_text(seed: int, total_chars: int, depth: float) -> tuple[str, str, float]:
    """(user message of exactly total_chars characters, code word, depth of the fact in the filler 0..1).

    Raises ValueError when total_chars or depth is out of range.
    """
    if not NEEDLE_MIN_CHARS <= total_chars <= NEEDLE_MAX_CHARS:
        raise ValueError(f"needle length {total_chars} characters: must be from {NEEDLE_MIN_CHARS} to "
                         f"{NEEDLE_MAX_CHARS}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"needle depth {depth}: must be from 0 (start) to 1 (end)")
    # A string seed goes through SHA-512 in random.seed, so the stream is the same in every process.
    rng = random.Random(f"onegpu-needle:{seed}")
    code_word = f"{rng.choice(_ADJECTIVES).upper()}-{rng.choice(_NOUNS).upper()}-{rng.randrange(1000, 10000)}"
    fact = f"The secret code word is {code_word}. "
    filler = _filler(rng, total_chars - len(fact) - len(QUESTION))
    boundaries = [0, *(i + 2 for i in range(len(filler) - 1) if filler[i:i + 2] == ". "), len(filler)]
    at = min(boundaries, key=lambda b: (abs(b - depth * len(filler)), b))
    return filler[:at] + fact + filler[at:] + QUESTION, code_word, at / max(len(filler), 1)


def needle_request(model_id: str, seed: int, total_chars: int, depth: float,
                   max_tokens: int = NEEDLE_MAX_TOKENS) -> tuple[bytes, Needle]:
    """One chat request line (newline-terminated) carrying the needle, and where the needle sits."""
    text, code_word, depth_actual = needle_text(seed, total_chars, depth)
    custom_id = f"needle-load-smoke-check-seed{seed}-chars{total_chars}-depth{depth:g}"
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL,
            "body": {"model": model_id, "messages": [{"role": "user", "content": text}],
                     "max_tokens": max_tokens, "temperature": 0, "top_p": 1, "seed": 0, "stream": False}}
    needle = Needle(seed=seed, total_chars=total_chars, depth_asked=depth,
                    depth_actual=round(depth_actual, 4), code_word=code_word, custom_id=custom_id,
                    max_tokens=max_tokens)
    return json.dumps(line, separators=(",", ":")).encode() + b"\n", needle


def canary_file(model_id: str, needle_line: bytes | None = None, template: bytes | None = None) -> bytes:
    """The canary request file the approval writes: the filled template, then the needle line if any."""
    filled = fill_template(default_template() if template is None else template, model_id)
    if not filled.endswith(b"\n"):
        filled += b"\n"
    return filled + (needle_line or b"")


def _reply_texts(body) -> tuple[str, str]:
    """(answer text, reasoning text) of the first choice of a chat or completions response body."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError:
            return "", ""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "", ""
    choice = choices[0]
    stated = choice.get("message")
    message: dict = stated if isinstance(stated, dict) else {}
    answer = message.get("content") if message else choice.get("text")
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return (answer if isinstance(answer, str) else ""), (reasoning if isinstance(reasoning, str) else "")


def check_needle(response_body, needle: Needle) -> str:
    """Where the code word shows up in the reply: "found", "only in the reasoning text" or "not found"."""
    answer, reasoning = _reply_texts(response_body)
    word = needle.code_word.lower()
    if word in answer.lower():
        return "found"
    return "only in the reasoning text" if word in reasoning.lower() else "not found"


def describe_needle(needle: Needle, result: str | None = None) -> str:
    """One line about the needle (and its check result when known), labelled as a smoke check."""
    line = (f"needle ({LABEL}): code word {needle.code_word} planted at depth {needle.depth_actual:.2f} of "
            f"{needle.total_chars} characters (about {needle.approx_tokens} tokens), seed {needle.seed}")
    return line if result is None else f"{line}: {result.upper()} in the reply"

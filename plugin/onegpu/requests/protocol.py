"""Pure: protocol.json binds a request file to its benchmark (own schema and axm/frozen-benchmark-requests@1).

It names the benchmark and split, the harness, dataset and scorer with their revisions, the interaction and
timing policy, the context and the SHA-256 of the request file. Every mismatch is reported at once, each
naming the field, the value and the rule.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from msgspec import Struct

from onegpu.core import strict_json
from onegpu.core.jsonable import to_json
from onegpu.core.shown import as_json as _show

OWN_SCHEMA = "onegpu/protocol@1"
LEGACY_SCHEMA = "axm/frozen-benchmark-requests@1"
INTERACTION = "independent_requests"
TIMING_POLICY = "offline-no-per-request-deadline"
MAX_PROTOCOL_BYTES = 1_000_000
MAX_TEXT_CHARS = 500

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Own schema: top-level field -> the keys its object holds (required, optional), or a scalar kind.
_OWN_OBJECTS = {
    "benchmark": (("id", "split"), ()),
    "harness": (("name", "revision"), ("configuration",)),
    "dataset": (("id", "revision"), ("items",)),
    "scorer": (("name", "revision"), ()),
}
_OWN_SCALARS = ("interaction", "timing_policy", "context_tokens", "requests_sha256")
_OWN_OPTIONAL = ("description",)

# The earlier kit's fields; each of its identity strings carries the name and the revision together.
_LEGACY_FIELDS = ("benchmark_id", "harness_revision", "dataset_revision", "scorer_revision", "interaction",
                  "timing_policy", "context", "requests_sha256")


class Protocol(Struct, frozen=True):
    """A bound protocol. Fields the earlier schema folds into one string are None there (see *_revision)."""

    source_schema: str
    path: str
    sha256: str
    benchmark: str
    split: str | None
    harness: str | None
    harness_revision: str
    harness_configuration: str | None
    dataset: str | None
    dataset_revision: str
    dataset_items: int | None
    scorer: str | None
    scorer_revision: str
    interaction: str
    timing_policy: str
    context_tokens: int
    requests_sha256: str

    def as_json(self) -> dict:
        return to_json(self)


class ProtocolError(ValueError):
    """Every rule a protocol file breaks, one line each."""

    def __init__(self, path: str, errors: list[str]):
        self.path, self.errors = path, errors
        super().__init__(f"{path}: " + "; ".join(errors))


def _is_placeholder(value) -> bool:
    return isinstance(value, str) and value.startswith("REPLACE_WITH")


def _text_problem(name: str, value) -> str | None:
    """The rule an identity string breaks, or None."""
    if _is_placeholder(value):
        return f"field {name}: value {_show(value)} is a placeholder: replace it with the real value"
    if not isinstance(value, str) or not value.strip():
        return f"field {name}: value {_show(value)}: must be a non-empty string"
    if len(value) > MAX_TEXT_CHARS or _CONTROL.search(value):
        return f"field {name}: must be at most {MAX_TEXT_CHARS} characters with no control characters"
    return None


def _binding_problems(fields: dict, names: dict, present: set, context_tokens: int,
                      requests_sha256: str) -> list[str]:
    """The policy and binding rules shared by both schemas (names: our key -> the file's field name; only the
    fields `present` in the file are judged)."""
    errors: list[str] = []
    interaction, timing = fields.get("interaction"), fields.get("timing_policy")
    if "interaction" in present and interaction != INTERACTION:
        errors.append(f"field {names['interaction']}: value {_show(interaction)}: must be {INTERACTION!r}: an "
                      "offline batch sends independent requests; interactive or multi-turn benchmarks need "
                      "their native harness (the serve window)")
    if "timing_policy" in present and timing != TIMING_POLICY:
        errors.append(f"field {names['timing_policy']}: value {_show(timing)}: must be {TIMING_POLICY!r}: an "
                      "offline batch keeps no per-request deadline rule; timed benchmarks need their native "
                      "harness (the serve window)")
    context = fields.get("context_tokens")
    if "context_tokens" not in present:
        pass
    elif _is_placeholder(context):
        errors.append(f"field {names['context_tokens']}: value {_show(context)} is a placeholder: replace it "
                      f"with the context the settings use ({context_tokens})")
    elif not isinstance(context, int) or isinstance(context, bool) or context < 1:
        errors.append(f"field {names['context_tokens']}: value {_show(context)}: must be a positive integer")
    elif context != context_tokens:
        errors.append(f"field {names['context_tokens']}: value {context}: must equal the settings' context of "
                      f"{context_tokens} tokens")
    digest = fields.get("requests_sha256")
    field = names["requests_sha256"]
    if "requests_sha256" not in present:
        pass
    elif _is_placeholder(digest):
        errors.append(f"field {field}: value {_show(digest)} is a placeholder: replace it with the SHA-256 of the "
                      f"frozen request file (the file given hashes to {requests_sha256})")
    elif not isinstance(digest, str) or not _HEX64.match(digest):
        errors.append(f"field {field}: value {_show(digest)}: must be a SHA-256 (64 hex characters)")
    elif digest.lower() != requests_sha256:
        errors.append(f"field {field}: value {digest}: does not match the request file, whose SHA-256 is "
                      f"{requests_sha256}: the file changed or the protocol belongs to another file")
    return errors


def _own(data: dict) -> tuple[dict, list[str]]:
    """Flatten the own schema into the Protocol's fields; the structural problems found on the way."""
    errors = []
    allowed = {"schema", *_OWN_OBJECTS, *_OWN_SCALARS, *_OWN_OPTIONAL}
    errors += [f"field {k}: unknown field (not in {OWN_SCHEMA})" for k in data if k not in allowed]
    errors += [f"field {k}: required" for k in (*_OWN_OBJECTS, *_OWN_SCALARS) if k not in data]
    flat: dict = {k: data.get(k) for k in _OWN_SCALARS}
    for name, (required, optional) in _OWN_OBJECTS.items():
        obj = data.get(name)
        if name in data and not isinstance(obj, dict):
            errors.append(f"field {name}: must be an object with {', '.join(required)}")
        if not isinstance(obj, dict):
            continue
        errors += [f"field {name}.{k}: unknown field (allowed: {', '.join((*required, *optional))})"
                   for k in obj if k not in (*required, *optional)]
        for key in required:
            if key not in obj:
                errors.append(f"field {name}.{key}: required")
            else:
                problem = _text_problem(f"{name}.{key}", obj[key])
                errors += [problem] if problem else []
        if "configuration" in obj:
            problem = _text_problem(f"{name}.configuration", obj["configuration"])
            errors += [problem] if problem else []
        items = obj.get("items")
        if "items" in obj and (not isinstance(items, int) or isinstance(items, bool) or items < 1):
            errors.append(f"field {name}.items: value {_show(items)}: must be a positive integer (the item "
                          "denominator)")
    if "description" in data and not isinstance(data["description"], str):
        errors.append(f"field description: value {_show(data['description'])}: must be a string")

    def pick(name: str, key: str):
        return data[name].get(key) if isinstance(data.get(name), dict) else None

    flat.update(benchmark=pick("benchmark", "id"), split=pick("benchmark", "split"),
                harness=pick("harness", "name"), harness_revision=pick("harness", "revision"),
                harness_configuration=pick("harness", "configuration"),
                dataset=pick("dataset", "id"), dataset_revision=pick("dataset", "revision"),
                dataset_items=pick("dataset", "items"),
                scorer=pick("scorer", "name"), scorer_revision=pick("scorer", "revision"))
    return flat, errors


def _legacy(data: dict) -> tuple[dict, list[str]]:
    """Read axm/frozen-benchmark-requests@1 as is: each identity string names the thing and its revision."""
    errors = [f"field {k}: unknown field (not in {LEGACY_SCHEMA})" for k in data
              if k not in ("schema", *_LEGACY_FIELDS)]
    errors += [f"field {k}: required" for k in _LEGACY_FIELDS if k not in data]
    for key in ("benchmark_id", "harness_revision", "dataset_revision", "scorer_revision"):
        if key in data:
            problem = _text_problem(key, data[key])
            errors += [problem] if problem else []
    flat = {"benchmark": data.get("benchmark_id"), "split": None, "harness": None,
            "harness_revision": data.get("harness_revision"), "harness_configuration": None, "dataset": None,
            "dataset_revision": data.get("dataset_revision"), "dataset_items": None, "scorer": None,
            "scorer_revision": data.get("scorer_revision"), "interaction": data.get("interaction"),
            "timing_policy": data.get("timing_policy"), "context_tokens": data.get("context"),
            "requests_sha256": data.get("requests_sha256")}
    return flat, errors


def bind_protocol(raw: bytes, *, path: str, context_tokens: int, requests_sha256: str) -> Protocol:
    """Validate protocol bytes and bind them to the settings' context and the request file's SHA-256.

    Raises ProtocolError listing every problem at once.
    """
    if len(raw) > MAX_PROTOCOL_BYTES:
        raise ProtocolError(path, [f"file: {len(raw)} bytes: a protocol file must be under {MAX_PROTOCOL_BYTES} "
                                   "bytes"])
    try:
        data = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        raise ProtocolError(path, [f"file: {exc}"]) from None
    if not isinstance(data, dict):
        raise ProtocolError(path, ["file: must be a JSON object"])
    schema = data.get("schema")
    if schema == OWN_SCHEMA:
        flat, errors = _own(data)
        names = {k: k for k in _OWN_SCALARS}
    elif schema == LEGACY_SCHEMA:
        flat, errors = _legacy(data)
        names = {"interaction": "interaction", "timing_policy": "timing_policy", "context_tokens": "context",
                 "requests_sha256": "requests_sha256"}
    else:
        raise ProtocolError(path, [f"field schema: value {_show(schema)}: must be {OWN_SCHEMA!r} or "
                                   f"{LEGACY_SCHEMA!r}"])
    # A missing field is reported once, as required, and not again by the binding rules.
    present = {k for k, name in names.items() if name in data}
    errors += _binding_problems(flat, names, present, context_tokens, requests_sha256)
    if errors:
        raise ProtocolError(path, errors)
    flat["requests_sha256"] = flat["requests_sha256"].lower()
    return Protocol(source_schema=schema, path=path, sha256=hashlib.sha256(raw).hexdigest(), **flat)


def load_protocol(path: Path, *, context_tokens: int, requests_sha256: str) -> Protocol:
    """Read and bind a protocol file; raises ProtocolError (never a traceback for bad input)."""
    shown = str(path)
    try:
        raw = strict_json.read_bounded(Path(path), MAX_PROTOCOL_BYTES)
    except strict_json.JSONFileError as exc:
        problem = (f"{exc.size} bytes: a protocol file must be under {MAX_PROTOCOL_BYTES} bytes"
                   if exc.kind == "too_large" else str(exc))
        raise ProtocolError(shown, [f"file: {problem}"]) from None
    return bind_protocol(raw, path=shown, context_tokens=context_tokens, requests_sha256=requests_sha256)


def describe(protocol: Protocol) -> list[str]:
    """Lines for the terminal: what the request file is bound to."""
    def named(name, revision):
        return f"{name} @ {revision}" if name else revision
    split = f" split {protocol.split}" if protocol.split else ""
    return [f"protocol {protocol.path} ({protocol.source_schema}) binds request file SHA-256 "
            f"{protocol.requests_sha256}",
            f"benchmark {protocol.benchmark}{split}; harness {named(protocol.harness, protocol.harness_revision)}; "
            f"dataset {named(protocol.dataset, protocol.dataset_revision)}; "
            f"scorer {named(protocol.scorer, protocol.scorer_revision)}",
            f"{protocol.interaction}, {protocol.timing_policy}, context {protocol.context_tokens} tokens"]

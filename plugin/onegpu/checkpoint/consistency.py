"""Pure: does the checkpoint hold what its config.json promises? config + tensor names (+ the KV dtype asked for
and the image's vLLM version when known) -> one row per check, warnings visible, never blocking.

Checks: decoder layers declared but holding no tensors (or tensors of undeclared layers); draft (MTP /
next-token-prediction) layers declared but absent (speculative decoding would start from uninitialised
weights) or present but undeclared; vision/audio towers and their configs; quantization
ignored-layer entries that name no module; tied embeddings against the presence of an lm_head; the KV-cache
dtype against the vLLM version that must accept it.
"""
from __future__ import annotations

import bisect
import fnmatch
import re
from itertools import compress

from msgspec import Struct, field
from packaging.version import InvalidVersion, Version

from onegpu.checkpoint.tensor_roles import collapse_experts
from onegpu.core.jsonable import to_json
from onegpu.core.kv_dtypes import KV_DTYPES

MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "mtp_num_layers")
# Name parts that carry draft-layer weights: `model.mtp.layers.N.` (MiMo V2, Qwen3-Next), `model.mtp_layers.N.`
# (MiMo-7B); DeepSeek V3 / GLM put them at `model.layers.<num_hidden_layers + i>.` (counted by index).
_MTP_PARTS = ("mtp", "mtp_layers", "mtp_block", "nextn")
_VISION_PARTS = frozenset(("visual", "vision_tower", "vision_model", "vision_encoder", "vit", "vpm", "image_encoder",
                           "multi_modal_projector", "mm_projector", "vision_projection", "vision_embed_tokens"))
_AUDIO_PARTS = frozenset(("audio_tower", "audio_model", "audio_encoder", "audio_projector", "apm", "audio",
                          "whisper_encoder"))
# The engine fuses these projections; an ignored-layer entry may use the fused name.
_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
          "w13": ("w1", "w3")}
SHOWN = 5

# dtype -> (refused below, accepted from): kv_dtypes.py holds the versions and their sources.
KV_DTYPE_VERSIONS = {name: (row.refused_below, row.accepted_from) for name, row in KV_DTYPES.items()}
# A 16-bit KV dtype other than the model's makes the cache hold the model dtype's bits read back as the other
# dtype: fluent nonsense with no error (vllm-project/vllm#54338, open when this was written).
_MODEL_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16"}


class Check(Struct, frozen=True):
    """One consistency check: "ok", "warning" or "unknown", with its message."""

    check: str
    status: str
    message: str

    def as_json(self) -> dict:
        return to_json(self)


def _names(items) -> str:
    items = list(items)
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _text_config(config: dict) -> dict:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def _declared_mtp(cfg: dict) -> tuple[str, int] | None:
    for key in MTP_KEYS:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


# Module names only a draft (MTP) layer has, for the DeepSeek/GLM layout that numbers it after the decoder layers.
_DRAFT_MODULES = frozenset(("eh_proj", "enorm", "hnorm", "shared_head"))


class NameScan(Struct):
    """What the tensor names say, gathered in one pass (a large MoE checkpoint has ~10^5 names)."""

    drafts: set = field(default_factory=set)  # draft layer labels: "mtp.0", or "layers.61" (DeepSeek layout)
    layers: set = field(default_factory=set)  # decoder layer indexes
    draft_like: set = field(default_factory=set)  # decoder-numbered layers that hold draft modules
    vision: list = field(default_factory=list)
    audio: list = field(default_factory=list)
    heads: list = field(default_factory=list)


def _after(parts: list[str], i: int) -> str:
    """The layer number after a draft container part (`mtp.layers.2.` / `mtp_layers.2.`), else "0"."""
    j = i + 2 if i + 1 < len(parts) and parts[i + 1] == "layers" else i + 1
    return parts[j] if j < len(parts) - 1 and parts[j].isdigit() else "0"


def scan_names(config: dict, names, groups: tuple | None = None) -> NameScan:
    """One pass over the tensor names: draft layers, decoder layer indexes, tower tensors, output heads.

    Tower tensors (vision/audio encoders number layers of their own) are not decoder layers. Nothing below reads
    an expert number, so each distinct collapsed name (collapse_experts) is classified once; tower and head names
    are then listed in full, in order. `groups` is (group_of, group_names) as a TensorTable holds them, when the
    caller has them: the names are then not collapsed again."""
    if groups is not None:
        group_of, distinct = groups
    else:
        maybe = collapse_experts(names)
        if maybe is None:
            return _scan_names(config, names)
        distinct = list(dict.fromkeys(maybe))
        number = {c: g for g, c in enumerate(distinct)}
        group_of = list(map(number.__getitem__, maybe))
    out = _scan_names(config, distinct)
    listed = {*out.vision, *out.audio, *out.heads}
    if listed:
        # Only the few tensors of listed groups reach Python code: the test over every tensor runs in C.
        wanted = {g for g, c in enumerate(distinct) if c in listed}
        kept = [(names[i], distinct[group_of[i]])
                for i in compress(range(len(names)), map(wanted.__contains__, group_of))]
        vision, audio, heads = set(out.vision), set(out.audio), set(out.heads)
        out.vision = [n for n, c in kept if c in vision]
        out.audio = [n for n, c in kept if c in audio]
        out.heads = [n for n, c in kept if c in heads]
    return out


def _scan_names(config: dict, names: list[str]) -> NameScan:
    out = NameScan()
    for name in names:
        parts = name.split(".")
        modules = set(parts[:-1])
        if not modules.isdisjoint(_MTP_PARTS):
            i = next(k for k, p in enumerate(parts) if p in _MTP_PARTS)
            out.drafts.add(f"mtp.{_after(parts, i)}")
            continue
        if not modules.isdisjoint(_VISION_PARTS):
            out.vision.append(name)
            continue
        if not modules.isdisjoint(_AUDIO_PARTS):
            out.audio.append(name)
            continue
        if "lm_head" in modules or name in ("output.weight", "embed_out.weight"):
            out.heads.append(name)
        if "layers" in modules:
            i = parts.index("layers")
            if i + 2 < len(parts) and parts[i + 1].isdigit():
                out.layers.add(int(parts[i + 1]))
                if not modules.isdisjoint(_DRAFT_MODULES):
                    out.draft_like.add(int(parts[i + 1]))
    n_layers = _text_config(config).get("num_hidden_layers")
    if isinstance(n_layers, int):
        out.drafts |= {f"layers.{i}" for i in out.draft_like if i >= n_layers}
    return out


def check_mtp(config: dict, names: list[str], scan: NameScan | None = None) -> Check:
    cfg = _text_config(config)
    declared, found = _declared_mtp(cfg), (scan or scan_names(config, names)).drafts
    if declared is None and not found:
        return Check("mtp", "ok", "no draft (MTP) layers declared or present")
    if declared is None:
        return Check("mtp", "warning", f"tensors of {len(found)} draft (MTP) layer(s) ({_names(sorted(found))}) but "
                                       f"config.json declares none ({', '.join(MTP_KEYS)}): the engine ignores them")
    key, count = declared
    if not found:
        return Check("mtp", "warning", f"config.json declares {key}={count} draft (MTP) layer(s) but no tensor holds "
                                       "them: speculative decoding (MTP / NEXTN) would start from uninitialised "
                                       "weights; the kit's launch enables none")
    if len(found) < count:
        return Check("mtp", "warning", f"config.json declares {key}={count} draft (MTP) layers; tensors hold only "
                                       f"{len(found)} ({_names(sorted(found))}): the rest would start uninitialised")
    return Check("mtp", "ok", f"{key}={count}: the tensors hold {len(found)} draft layer(s)")


def check_layer_count(config: dict, names: list[str], scan: NameScan | None = None) -> Check:
    """The decoder layers config.json declares against the layer indexes the tensor names hold."""
    n = _text_config(config).get("num_hidden_layers")
    scan = scan or scan_names(config, names)
    if not isinstance(n, int) or isinstance(n, bool) or not scan.layers:
        return Check("layers", "unknown", "config.json states no num_hidden_layers, or no tensor name carries a layer "
                                          "number: the layer count is not compared")
    missing = [str(i) for i in range(n) if i not in scan.layers]
    extra = [str(i) for i in sorted(scan.layers) if i >= n and i not in scan.draft_like]
    if missing:
        return Check("layers", "warning", f"config.json declares num_hidden_layers={n} but no tensor holds layer(s) "
                                          f"{_names(missing)}: they would start from uninitialised weights")
    if extra:
        return Check("layers", "warning", f"tensors of {len(extra)} layer(s) beyond num_hidden_layers={n} "
                                          f"({_names(extra)}) that are not draft layers: the engine ignores them")
    return Check("layers", "ok", f"num_hidden_layers={n}: every layer has tensors")


def check_towers(config: dict, names: list[str], scan: NameScan | None = None) -> list[Check]:
    scan = scan or scan_names(config, names)
    rows = []
    for kind, key, parts, tensors in (("vision", "vision_config", _VISION_PARTS, scan.vision),
                                      ("audio", "audio_config", _AUDIO_PARTS, scan.audio)):
        declared = isinstance(config.get(key), dict)
        if declared and not tensors:
            rows.append(Check(f"{kind}_tower", "warning", f"config.json has {key} but no {kind} tower tensor exists "
                              f"(looked for name parts {', '.join(sorted(parts))}): {kind} inputs would meet "
                              "uninitialised weights, or the engine refuses the checkpoint"))
        elif tensors and not declared:
            rows.append(Check(f"{kind}_tower", "warning", f"{len(tensors)} {kind} tower tensor(s) ({_names(tensors)}) "
                              f"but config.json has no {key}: the engine ignores them or fails to load them"))
        else:
            state = f"{key} and {len(tensors)} tower tensor(s)" if declared else f"no {key} and no tower tensors"
            rows.append(Check(f"{kind}_tower", "ok", state))
    return rows


def _candidates(entry: str) -> list[str]:
    """The entry, and its per-projection names when it uses a name the engine fuses (qkv_proj -> q/k/v_proj)."""
    for fused, parts in _FUSED.items():
        if re.search(rf"(^|\.){fused}($|\.)", entry):
            return [entry, *(re.sub(rf"(^|\.){fused}($|\.)", rf"\g<1>{p}\g<2>", entry) for p in parts)]
    return [entry]


def _names_module(sorted_names: list[str], module: str) -> bool:
    """True when `module` is a tensor name or a dotted prefix of one (binary search over the sorted names)."""
    i = bisect.bisect_left(sorted_names, module)
    if i < len(sorted_names) and sorted_names[i] == module:
        return True
    j = bisect.bisect_left(sorted_names, module + ".")
    return j < len(sorted_names) and sorted_names[j].startswith(module + ".")


def _module_names(names: list[str]) -> list[str]:
    """Every dotted prefix of every tensor name (only pattern entries need the full list)."""
    prefixes: set[str] = set()
    for name in names:
        parts = name.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(prefixes)


def _matches(entry: str, sorted_names: list[str], modules: list[str]) -> bool:
    if entry.startswith("re:"):
        try:
            pattern = re.compile(entry[3:])
        except re.error:
            return True  # not the kit's to judge: the engine parses its own patterns
        return any(pattern.search(m) for m in modules)
    if any(c in entry for c in "*?["):
        return any(fnmatch.fnmatchcase(m, entry) for m in modules)
    return any(_names_module(sorted_names, c) or _names_module(sorted_names, f"model.{c}") for c in _candidates(entry))


def check_ignored_layers(ignored: list[str], names: list[str]) -> Check:
    if not ignored:
        return Check("ignored_layers", "ok", "the quantization config names no ignored layers")
    sorted_names = sorted(names)
    patterns = any(e.startswith("re:") or any(c in e for c in "*?[") for e in ignored)
    modules = _module_names(names) if patterns else []
    missing = [e for e in ignored if not _matches(e, sorted_names, modules)]
    if missing:
        return Check("ignored_layers", "warning", f"{len(missing)} of {len(ignored)} quantization ignored-layer "
                     f"entries name no module of the checkpoint: {_names(missing)} (compared with the tensor names, "
                     "fused qkv/gate_up names expanded): a stale config, a layout the config was not written for, or "
                     "a name only the engine's model code uses")
    return Check("ignored_layers", "ok", f"all {len(ignored)} ignored-layer entries name modules of the checkpoint")


def check_tied_head(config: dict, names: list[str], scan: NameScan | None = None) -> Check:
    cfg = _text_config(config)
    tie = cfg.get("tie_word_embeddings")
    heads = (scan or scan_names(config, names)).heads
    if not isinstance(tie, bool):
        return Check("tied_embeddings", "unknown", "config.json does not state tie_word_embeddings (the default "
                     f"depends on the model class); lm_head tensors: {_names(heads) or 'none'}")
    if tie and heads:
        return Check("tied_embeddings", "warning", f"tie_word_embeddings is true but the checkpoint holds an output "
                     f"head ({_names(heads)}): the engine ties the head to the embeddings and ignores the stored one, "
                     "which may not be what was trained")
    if not tie and not heads:
        return Check("tied_embeddings", "warning", "tie_word_embeddings is false but no lm_head tensor exists: the "
                     "output layer would start from uninitialised weights")
    return Check("tied_embeddings", "ok", f"tie_word_embeddings={str(tie).lower()} and "
                                          f"{'an lm_head' if heads else 'no lm_head'} tensor, as it should be")


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def check_kv_dtype(kv_dtype: str | None, vllm_version: str | None, version_source: str, config: dict) -> list[Check]:
    """Whether the image's vLLM accepts the KV dtype asked for ("unknown" without a version), and the
    16-bit reinterpretation hazard."""
    asked = kv_dtype or "auto"
    rows = []
    refused_below, accepted_from = KV_DTYPE_VERSIONS.get(asked, (None, None))
    version = _version(vllm_version)
    if asked == "auto":
        rows.append(Check("kv_dtype_version", "ok", "KV dtype 'auto' (the model's dtype): every vLLM accepts it"))
    elif version is None:
        why = f"vLLM version {vllm_version!r} cannot be read" if vllm_version else \
            "the image's vLLM version is not known in a scan (the runtime probe reads it during the approval)"
        rows.append(Check("kv_dtype_version", "unknown", f"KV dtype {asked!r}: {why}"))
    elif accepted_from is not None and version >= Version(accepted_from):
        rows.append(Check("kv_dtype_version", "ok", f"KV dtype {asked!r} is accepted by vLLM {vllm_version} "
                                                    f"({version_source}; from {accepted_from} on)"))
    elif refused_below is not None and version < Version(refused_below):
        rows.append(Check("kv_dtype_version", "warning", f"KV dtype {asked!r} is not accepted by vLLM {vllm_version} "
                          f"({version_source}): it needs vLLM >= {accepted_from}; the engine would refuse "
                          "--kv-cache-dtype at start"))
    else:
        rows.append(Check("kv_dtype_version", "unknown", f"KV dtype {asked!r} with vLLM {vllm_version} "
                          f"({version_source}): not known either way (known accepted from {accepted_from})"))
    model = _MODEL_DTYPES.get(str(_text_config(config).get("torch_dtype") or _text_config(config).get("dtype")))
    if asked in ("bfloat16", "float16") and model is not None and model != asked:
        rows.append(Check("kv_dtype_model", "warning", f"KV dtype {asked!r} differs from the model's {model}: an "
                          "open vLLM report (vllm-project/vllm#54338) shows such a cache read back as the other "
                          "dtype, giving fluent nonsense with no error; prefer 'auto' or fp8"))
    return rows


def consistency_checks(config: dict, names, ignored_layers: list[str], kv_dtype: str | None,
                       vllm_version: str | None = None, version_source: str = "", groups: tuple | None = None
                       ) -> list[Check]:
    """Every consistency row for a checkpoint (config.json + tensor names) and the settings' KV dtype; `groups` as
    scan_names takes them."""
    scan = scan_names(config, names, groups)
    return [check_layer_count(config, names, scan), check_mtp(config, names, scan),
            *check_towers(config, names, scan), check_ignored_layers(ignored_layers, names),
            check_tied_head(config, names, scan), *check_kv_dtype(kv_dtype, vllm_version, version_source, config)]


def check_lines(rows: list[Check]) -> list[str]:
    """Fact lines, one per check: OK rows short, warnings and unknowns in full."""
    return [f"consistency {r.check}: {r.status.upper()}: {r.message}" for r in rows]

"""Tensor names -> the role the capacity table keeps apart, the decoder layer, and whether data is packed.

Pure functions over names and dtypes, kept to a few C-level string operations each because they run once
per tensor (10^5 of them in a large MoE checkpoint). Roles: routed experts (per-expert or fused
expert weights and their scales), embeddings and head, and everything else as shared/dense (attention,
norms, routers, shared experts).
"""
from __future__ import annotations

import re

ROUTED_EXPERTS = "routed_experts"
SHARED_DENSE = "shared_dense"
EMBEDDINGS_HEAD = "embeddings_head"

# Head and embedding modules that do not say "embed" (GPT-2 `wte`/`wpe`, DeepSeek MTP `shared_head`).
_HEAD_PARTS = (".lm_head.", ".wte.", ".wpe.", ".shared_head.")
# Containers whose next name part is the decoder layer number (one regular expression: one C-level scan).
_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.([0-9]+)\.")
# Layer numbers as written ("0".."9999", no leading zeros) -> int: a lookup is 3x faster than parsing.
_LAYER_NUMBERS = {str(n): n for n in range(10_000)}

# Integer tensors whose elements are several values packed together: counted by bytes, not parameters.
_PACKED_SUFFIXES = ("_blocks", "_packed", ".qweight", ".qzeros")
_INTEGER_DTYPES = frozenset(("U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"))


def tensor_role(name: str) -> str:
    """The capacity role of a tensor from its name.

    `.experts.` covers `mlp.experts.7.down_proj.weight` (DeepSeek, Qwen-MoE, MiMo), `block_sparse_moe.experts.`
    (Mixtral), `feed_forward.experts.` (Llama 4) and fused `mlp.experts.gate_up_proj_blocks` (gpt-oss);
    `shared_experts.` / `shared_expert.` never match (an underscore, not a dot, precedes "experts").
    Any name part containing "embed" (embed_tokens, tok_embeddings, word_embeddings, embed_out), the usual
    head names, and the original Llama layout's top-level `output.weight` are embeddings/head.
    """
    dotted = f".{name}."
    if ".experts." in dotted:
        return ROUTED_EXPERTS
    if "embed" in name or name.startswith("output.") or any(part in dotted for part in _HEAD_PARTS):
        return EMBEDDINGS_HEAD
    return SHARED_DENSE


def tensor_roles(names) -> list[str]:
    """tensor_role of each name; routed experts (nearly every tensor of a large MoE) without a call each."""
    return [ROUTED_EXPERTS if ".experts." in name else tensor_role(name) for name in names]


def layer_index(name: str) -> int | None:
    """The decoder layer number a tensor name carries (`model.layers.12.`, `transformer.h.3.`), or None."""
    if name.startswith("model.layers."):  # the common layout, without the regex (~10^5 names per checkpoint)
        end = name.find(".", 13)
        number = _LAYER_NUMBERS.get(name[13:end]) if end > 13 else None
        if number is not None:
            return number
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def is_packed(name: str, dtype: str) -> bool:
    """True when the tensor's elements hold packed sub-byte values (U8 blocks, `*_blocks`, `*_packed`).

    U8 is always treated as packed: in checkpoints it holds F4 pairs (mxfp4, nvfp4) or E8M0 scale bytes, so
    only its byte count is certain.
    """
    if dtype == "U8":
        return True
    return dtype in _INTEGER_DTYPES and name.endswith(_PACKED_SUFFIXES)


def packed_rows(names: list[str], dtype: str) -> list[bool]:
    """is_packed for each of `names`, all of `dtype`: only integer dtypes other than U8 depend on the name."""
    if dtype in _INTEGER_DTYPES and dtype != "U8":
        return [is_packed(name, dtype) for name in names]
    return [dtype == "U8"] * len(names)


# The expert number of a routed expert's tensor (`...experts.<N>.<proj>.<suffix>`, the last such number in the name,
# as offload.engine_name reads it), over names joined one per line.
_EXPERT_NUMBER = re.compile(r"\.experts\.\d+(?=\.[A-Za-z0-9_]+\.[^\n])(?![^\n]*\.experts\.\d+\.[A-Za-z0-9_]+\.[^\n])\.")


def collapse_experts(names: list[str]) -> list[str] | None:
    """Each name with its expert number made 0, or None when a name holds a line break.

    A large MoE checkpoint's ~10^5 names are mostly one expert's few tensors repeated for every expert: collapsed,
    they repeat exactly, so a pass that never reads the expert number classifies each distinct name once. One
    regex substitution over the joined names does it in C."""
    joined = "\n".join(names)
    if joined.count("\n") != len(names) - 1:
        return None
    return _EXPERT_NUMBER.sub(".experts.0.", joined).split("\n") if names else []

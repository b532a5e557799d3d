"""The quantization a checkpoint declares, read from config.json (or ModelOpt's hf_quant_config.json).

Pure: dicts in, QuantFacts out. Recognised: unquantized (no quantization_config), fp8 (DeepSeek-style block
FP8, with an optional store_dtype such as mxfp4 for the experts), mxfp4 (gpt-oss), modelopt (NVFP4, FP8
variants) and compressed-tensors. Anything else is recognised=False with a description naming it: the
capacity code shows that as UNKNOWN, never as an error.
"""
from __future__ import annotations

from onegpu.checkpoint.model import QuantFacts

# ModelOpt algorithms the engine loads (vLLM's modelopt / modelopt_fp4 / modelopt_mxfp8 methods).
MODELOPT_ALGOS = ("NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "MXFP8", "MIXED_PRECISION")


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _ignored(qc: dict, *keys: str) -> list[str]:
    for key in keys:
        if key in qc:
            return _strings(qc[key])
    return []


def quant_facts(config: dict, hf_quant_config: dict | None = None) -> QuantFacts:
    """QuantFacts for a config.json dict; hf_quant_config is ModelOpt's side file when there is one."""
    qc = config.get("quantization_config")
    if qc is None and isinstance(hf_quant_config, dict):
        qc = _modelopt_side_file(hf_quant_config)
    if qc is None:
        dtype = config.get("torch_dtype") or config.get("dtype")
        return QuantFacts(None, None, True, f"unquantized (weights as stored{f', {dtype}' if dtype else ''})")
    if not isinstance(qc, dict):
        return QuantFacts(None, None, False, f"quantization_config is {type(qc).__name__}, not an object")
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        return QuantFacts(None, None, False, "quantization_config has no quant_method")
    reader = _READERS.get(method.lower())
    if reader is None:
        return QuantFacts(method, None, False, f"quantization method {method!r} is not one the kit reads; "
                          "capacity uses the header bytes as stored")
    return reader(method.lower(), qc)


def _modelopt_side_file(side: dict) -> dict | None:
    """hf_quant_config.json ({producer: {name: modelopt}, quantization: {...}}) as a quantization_config."""
    producer = side.get("producer")
    quant = side.get("quantization")
    if isinstance(producer, dict) and producer.get("name") == "modelopt" and isinstance(quant, dict):
        return {"quant_method": "modelopt", **quant}
    return None


def _fp8(method: str, qc: dict) -> QuantFacts:
    store = qc.get("store_dtype") if isinstance(qc.get("store_dtype"), str) else None
    parts = [f"fp8 ({qc.get('fmt', 'e4m3')}"]
    block = qc.get("weight_block_size")
    if isinstance(block, list) and block:
        parts.append(f", {'x'.join(str(b) for b in block)} weight blocks")
    if isinstance(qc.get("activation_scheme"), str):
        parts.append(f", {qc['activation_scheme']} activations")
    parts.append(")")
    if store:
        parts.append(f"; weights stored as {store}")
    return QuantFacts("fp8", store, True, "".join(parts),
                      _ignored(qc, "ignored_layers", "modules_to_not_convert"))


def _mxfp4(method: str, qc: dict) -> QuantFacts:
    return QuantFacts("mxfp4", "mxfp4", True, "mxfp4 (4-bit E2M1 values in U8 blocks, E8M0 scales per 32)",
                      _ignored(qc, "modules_to_not_convert", "ignored_layers"))


def _modelopt(method: str, qc: dict) -> QuantFacts:
    algo = qc.get("quant_algo")
    if algo is None and isinstance(qc.get("quantization"), dict):
        algo = qc["quantization"].get("quant_algo")
        qc = {**qc, **qc["quantization"]}
    ignored = _ignored(qc, "exclude_modules", "ignore", "modules_to_not_convert")
    if not isinstance(algo, str):
        return QuantFacts("modelopt", None, False, "modelopt quantization without a quant_algo", ignored)
    if algo.upper() not in MODELOPT_ALGOS:
        return QuantFacts("modelopt", None, False, f"modelopt quant_algo {algo!r} is not one the kit reads",
                          ignored)
    store = "nvfp4" if algo.upper() == "NVFP4" else algo.lower()
    detail = " (4-bit E2M1 values in U8, F8_E4M3 scales per 16)" if store == "nvfp4" else ""
    return QuantFacts("modelopt", store, True, f"modelopt {algo}{detail}", ignored)


def _compressed_tensors(method: str, qc: dict) -> QuantFacts:
    formats = set()
    if isinstance(qc.get("format"), str):
        formats.add(qc["format"])
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        formats.update(g["format"] for g in groups.values() if isinstance(g, dict) and isinstance(g.get("format"), str))
    store = ", ".join(sorted(formats)) or None
    return QuantFacts("compressed-tensors", store, True,
                      f"compressed-tensors ({store or 'format not stated'})", _ignored(qc, "ignore"))


_READERS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
    "compressed-tensors": _compressed_tensors,
    "compressed_tensors": _compressed_tensors,
}

"""Write a header-only MiMo-V2.6 checkpoint: the real tensor layout (names, shapes, dtypes), no weights.

    python examples/make_mimo_checkpoint.py                 # Flash -> examples/demo-checkpoints/MiMo-V2.6-Flash
    python examples/make_mimo_checkpoint.py --model pro     # Pro   -> examples/demo-checkpoints/MiMo-V2.6-Pro

Beside the folder it writes <folder>.settings.json: the demo settings with model_path set to that folder; for Pro
also <folder>.tp2.settings.json, the same checkpoint under the 2-GPU protocol (TP 2 x PP 1).
    python examples/make_mimo_checkpoint.py --out DIR       # another folder (absolute or relative)

Every shard is a valid safetensors file whose data region is a hole (see header_only_writer.py), and every
shard's __metadata__ says "onegpu.synthetic": "header-only: no weights", so the kit marks the checkpoint
synthetic in the terminal, the receipt and the report. Nothing can be loaded from it.

Where the layout comes from (public sources, read in 2026):
* Model dimensions: examples/configs/*.config.json, reconstructed from the published config.json values;
  examples/configs/README.md cites each field's source and names what is assumed. Their model_type is
  "mimo_v2_flash" (transformers' own MiMoV2FlashConfig) where the releases say "mimo_v2" with remote code, and
  they spell out layer_types, rope_parameters, rms_norm_eps and torch_dtype, so the real vLLM image parses them
  without remote code into the layout the kit plans with (tests_offline/sessions/test_real_engine_configs.py).
* Tensor names and the fused, KV-head-sharded FP8 qkv_proj with its per-shard 128x128 scale grid:
  vllm-project/vllm vllm/model_executor/models/mimo_v2.py (MiMoV2Model.load_weights, _shard_fp8_qkv_proj)
  and mimo_v2_mtp.py (the model.mtp.layers.N.* names: enorm, hnorm, eh_proj, input_layernorm, self_attn,
  pre_mlp_layernorm, mlp, final_layernorm).
* Storage of the released checkpoint: radixark/miles tools/convert_mimo_v2_to_bf16.py (it reads
  MiMo-V2.6-Flash-RL): qkv_proj fused and interleaved over num_key_value_heads shards, each shard
  FP8-quantized on its own and padded to whole 128-row blocks (4 x 27 scale rows for 13568 rows); dense
  and MTP linears blockwise FP8 with `weight_scale_inv` (F32); routed experts MXFP4 with `.weight` = packed
  E2M1 pairs in uint8 [rows, cols/2] and `.weight_scale` = one E8M0 exponent byte per 32 inputs
  [rows, cols/32], decoded as exp2(byte - 127), i.e. stored as U8 (not the F8_E8M0 dtype).
* JustVugg/colibri docs/mimo.md: o_proj, router, norms, embeddings and head in BF16; 12.75 MiB per Flash
  expert; Flash 48 layers (39 sliding + 9 full), Pro 70 (60 + 10), 256 / 384 experts.
* ggml-org/llama.cpp conversion/mimo.py: the V2 family ships 3 MTP layers under model.mtp.layers.{0,1,2}.

Assumed (no public source states it; the plausible choice is made and named):
* dtypes of the router (BF16 [experts, hidden], as moe_router_dtype says) with its e_score_correction_bias
  (F32), of attention_sink_bias (BF16, one per head of the sliding-window layers), of the MTP eh_proj and
  MTP o_proj (BF16: vLLM builds both without a quant method);
* tensor order inside the shards and 5 GB shards (the Hugging Face default max_shard_size); the release's
  shard count and file names are not known;
* the vision tower, audio encoder, audio tokenizer and DFlash drafter of the release are NOT written: their
  configs were not found. The checkpoint here is the text model plus its MTP layers.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.header_only_writer import Tensor, allocated_bytes, tensor_bytes, write_sharded  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent
CONFIGS = EXAMPLES / "configs"
# Inside this clone (ignored by git), never a fixed folder in /tmp that every user of the machine shares.
DEMO_ROOT = EXAMPLES / "demo-checkpoints"
MODELS = {  # --model -> (config file, default folder name, settings template)
    "flash": ("MiMo-V2.6-Flash.config.json", "MiMo-V2.6-Flash", "demo-settings.json"),
    "pro": ("MiMo-V2.6-Pro.config.json", "MiMo-V2.6-Pro", "demo-settings-pro.json"),
}
# --model -> (settings template, suffix) of a multi-GPU protocol demo: <folder>.<suffix>.settings.json
PROTOCOL_DEMOS = {"pro": ("demo-settings-pro-tp2.json", "tp2")}
SYNTHETIC_METADATA = {"onegpu.synthetic": "header-only: no weights", "format": "pt"}
MARKER = "ONEGPU-SYNTHETIC-CHECKPOINT.txt"
SHARD_BYTES = 5_000_000_000
FP8_BLOCK = 128


def fp8(name: str, rows: int, cols: int, scale_row_blocks: int | None = None) -> list[Tensor]:
    """A blockwise FP8 linear: F8_E4M3 [rows, cols] and its F32 scale per 128x128 block."""
    scale_rows = scale_row_blocks if scale_row_blocks is not None else math.ceil(rows / FP8_BLOCK)
    return [(f"{name}.weight", "F8_E4M3", (rows, cols)),
            (f"{name}.weight_scale_inv", "F32", (scale_rows, math.ceil(cols / FP8_BLOCK)))]


def mxfp4(name: str, rows: int, cols: int, block: int) -> list[Tensor]:
    """An MXFP4 linear: E2M1 pairs packed in U8 [rows, cols/2] and one E8M0 byte (U8) per `block` inputs."""
    return [(f"{name}.weight", "U8", (rows, cols // 2)), (f"{name}.weight_scale", "U8", (rows, cols // block))]


def bf16(name: str, *shape: int) -> Tensor:
    return (name, "BF16", shape)


def attention(prefix: str, cfg: dict, sliding: bool) -> list[Tensor]:
    """Fused qkv_proj (FP8, sharded over num_key_value_heads with a per-shard scale grid), o_proj, sink bias."""
    pre = "swa_" if sliding else ""
    heads, kv = cfg[f"{pre}num_attention_heads"], cfg[f"{pre}num_key_value_heads"]
    k_dim, v_dim = cfg[f"{pre}head_dim"], cfg[f"{pre}v_head_dim"]
    hidden, shards = cfg["hidden_size"], cfg["num_key_value_heads"]
    rows = heads * k_dim + kv * (k_dim + v_dim)
    if rows % shards:
        raise ValueError(f"{prefix}: {rows} qkv rows do not split into {shards} KV-head shards")
    out = fp8(f"{prefix}.qkv_proj", rows, hidden, shards * math.ceil(rows // shards / FP8_BLOCK))
    out.append(bf16(f"{prefix}.o_proj.weight", hidden, heads * v_dim))
    if cfg[f"add_{'swa' if sliding else 'full'}_attention_sink_bias"]:
        out.append(bf16(f"{prefix}.attention_sink_bias", heads))
    return out


def dense_mlp(prefix: str, hidden: int, inter: int) -> list[Tensor]:
    return [*fp8(f"{prefix}.gate_proj", inter, hidden), *fp8(f"{prefix}.up_proj", inter, hidden),
            *fp8(f"{prefix}.down_proj", hidden, inter)]


def moe(prefix: str, cfg: dict) -> list[Tensor]:
    """Router (BF16) with its correction bias (F32), then each routed expert's six MXFP4 tensors."""
    hidden, inter, experts = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    block = cfg["quantization_config"]["mxfp4_block_size"]
    out = [bf16(f"{prefix}.gate.weight", experts, hidden),
           (f"{prefix}.gate.e_score_correction_bias", "F32", (experts,))]
    for e in range(experts):
        p = f"{prefix}.experts.{e}"
        out += [*mxfp4(f"{p}.gate_proj", inter, hidden, block), *mxfp4(f"{p}.up_proj", inter, hidden, block),
                *mxfp4(f"{p}.down_proj", hidden, inter, block)]
    return out


def decoder_layer(i: int, cfg: dict) -> list[Tensor]:
    p, hidden = f"model.layers.{i}", cfg["hidden_size"]
    out = [bf16(f"{p}.input_layernorm.weight", hidden)]
    out += attention(f"{p}.self_attn", cfg, sliding=cfg["hybrid_layer_pattern"][i] == 1)
    out.append(bf16(f"{p}.post_attention_layernorm.weight", hidden))
    if cfg["moe_layer_freq"][i]:
        return out + moe(f"{p}.mlp", cfg)
    return out + dense_mlp(f"{p}.mlp", hidden, cfg["intermediate_size"])


def mtp_layer(i: int, cfg: dict) -> list[Tensor]:
    """One draft layer: sliding-window attention and a dense FFN, as vLLM's MiMoV2MTPLayer builds it."""
    p, hidden = f"model.mtp.layers.{i}", cfg["hidden_size"]
    return [bf16(f"{p}.enorm.weight", hidden), bf16(f"{p}.hnorm.weight", hidden),
            bf16(f"{p}.eh_proj.weight", hidden, 2 * hidden), bf16(f"{p}.input_layernorm.weight", hidden),
            *attention(f"{p}.self_attn", cfg, sliding=True), bf16(f"{p}.pre_mlp_layernorm.weight", hidden),
            *dense_mlp(f"{p}.mlp", hidden, cfg["intermediate_size"]), bf16(f"{p}.final_layernorm.weight", hidden)]


def mimo_tensors(cfg: dict) -> list[Tensor]:
    """Every tensor of the text model and its MTP layers, in model order."""
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    out = [bf16("model.embed_tokens.weight", vocab, hidden)]
    for i in range(cfg["num_hidden_layers"]):
        out += decoder_layer(i, cfg)
    out += [bf16("model.norm.weight", hidden), bf16("lm_head.weight", vocab, hidden)]
    for i in range(cfg.get("num_nextn_predict_layers") or 0):
        out += mtp_layer(i, cfg)
    return out


def write_side_files(root: Path, config_text: str, model: str) -> None:
    """config.json (the reconstruction, unchanged), placeholder tokenizer files and a plain-words marker."""
    (root / "config.json").write_text(config_text)
    note = "placeholder: this demo checkpoint holds no tokenizer and no weights (header-only, written by onegpu)"
    (root / "tokenizer_config.json").write_text(json.dumps(
        {"onegpu.placeholder": note, "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1048576},
        indent=2) + "\n")
    (root / "tokenizer.json").write_text(json.dumps(
        {"onegpu.placeholder": note, "version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}},
        indent=2) + "\n")
    (root / MARKER).write_text(
        f"Header-only MiMo-V2.6-{model.capitalize()} checkpoint written by examples/make_mimo_checkpoint.py.\n"
        "Every shard has the real tensor names, shapes and dtypes over a sparse (empty) data region: it holds\n"
        "NO weights, and no engine can load it. The tokenizer files are placeholders with no vocabulary.\n")


def prepare_folder(root: Path) -> None:
    """Create `root`, or empty it when an earlier run of this script wrote it; refuse any other folder."""
    if root.exists():
        if not root.is_dir():
            raise SystemExit(f"{root} exists and is not a folder")
        if any(root.iterdir()) and not (root / MARKER).is_file():
            raise SystemExit(f"{root} is not empty and was not written by this script: choose another --out")
        shutil.rmtree(root)
    root.mkdir(parents=True)


def write_checkpoint(model: str, root: Path) -> dict:
    """Write the header-only checkpoint of `model` ("flash" or "pro") into `root`; returns a summary."""
    config_name = MODELS[model][0]
    config_text = (CONFIGS / config_name).read_text()
    cfg = json.loads(config_text)
    tensors = mimo_tensors(cfg)
    prepare_folder(root)
    index = write_sharded(root, tensors, SHARD_BYTES, SYNTHETIC_METADATA)
    write_side_files(root, config_text, model)
    return {"root": str(root), "config": config_name, "tensors": len(tensors),
            "shards": len(set(index["weight_map"].values())), "total_size": index["metadata"]["total_size"],
            "expert_bytes": sum(tensor_bytes(d, s) for n, d, s in tensors if ".experts." in n),
            "allocated_bytes": allocated_bytes(root)}


def write_settings(model: str, root: Path, template: str | None = None, suffix: str = "") -> Path:
    """<root>[.suffix].settings.json beside the folder: the model's demo settings (or `template`) with model_path
    set to `root`."""
    settings = json.loads((EXAMPLES / (template or MODELS[model][2])).read_text())
    settings["model_path"] = str(root)
    path = root.with_name(f"{root.name}{'.' + suffix if suffix else ''}.settings.json")
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a header-only MiMo-V2.6 checkpoint (no weights).")
    parser.add_argument("--model", choices=sorted(MODELS), default="flash", help="which layout (default flash)")
    parser.add_argument("--out", help=f"folder to write (default {DEMO_ROOT}/<model folder>)")
    args = parser.parse_args(argv)
    root = Path(args.out).absolute() if args.out else DEMO_ROOT / MODELS[args.model][1]
    started = time.monotonic()
    summary = write_checkpoint(args.model, root)
    settings_path = write_settings(args.model, root)
    elapsed = time.monotonic() - started
    gib = summary["total_size"] / 2**30
    print(f"wrote {summary['root']}: {summary['tensors']:,} tensors in {summary['shards']} header-only shards, "
          f"{summary['total_size']:,} bytes ({gib:,.1f} GiB) declared, {summary['allocated_bytes'] / 2**20:.1f} MiB "
          f"on disk, {elapsed:.1f} s")
    print("SYNTHETIC: no weights; every shard's __metadata__ says onegpu.synthetic = header-only: no weights")
    print(f"settings: {settings_path} (the demo settings, model_path set to {root})")
    if args.model in PROTOCOL_DEMOS:
        template, suffix = PROTOCOL_DEMOS[args.model]
        print(f"settings: {write_settings(args.model, root, template, suffix)} ({template}: the 2-GPU protocol, "
              "TP 2 x PP 1, on GPUs 0 and 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

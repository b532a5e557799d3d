"""The demo end to end: the header-only MiMo-V2.6 generator, then `pytest -m scan` against the research target.

Every expected number here is derived in this file from the model's config.json (tensor families, bytes per
dtype, the hybrid KV pattern, the offload order) and never taken from the generator's or the kit's code.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from safetensors import safe_open

from tests_offline.paths import PROFILES, REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"
GIB = 2**30
BYTES_PER_ELEMENT = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
SYNTHETIC_BANNER = "CHECKPOINT IS SYNTHETIC"
CONTAINER_OWN_NEEDS = 8 * GIB  # what the kit's plan states it ASSUMES the engine container needs for itself
# --model -> (config, demo settings, host RAM the README's command states, published parameter count)
DEMOS = {"flash": ("MiMo-V2.6-Flash.config.json", "demo-settings.json", 256, 309e9),
         "pro": ("MiMo-V2.6-Pro.config.json", "demo-settings-pro.json", 768, 1.02e12)}


def generate(model: str, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--model", model,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - started


@pytest.fixture(scope="module", params=sorted(DEMOS))
def demo(request, tmp_path_factory):
    """A demo checkpoint written by the generator's command line into a temporary folder."""
    config_name, settings_name, host_ram_gib, params = DEMOS[request.param]
    root = tmp_path_factory.mktemp(request.param) / config_name.removesuffix(".config.json")
    done, wall_s = generate(request.param, root)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"model": request.param, "root": root, "wall_s": wall_s, "settings_name": settings_name,
            "host_ram_gib": host_ram_gib, "params": params,
            "config": json.loads((EXAMPLES / "configs" / config_name).read_text())}


@pytest.fixture(scope="module")
def scan(demo, tmp_path_factory):
    """`pytest -m scan` with a copy of the demo settings pointing at the generated checkpoint."""
    work = tmp_path_factory.mktemp("scan")
    settings = json.loads((EXAMPLES / demo["settings_name"]).read_text())
    settings["model_path"] = str(demo["root"])
    (work / "settings.json").write_text(json.dumps(settings))
    out = work / "run"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--settings={work / 'settings.json'}",
                           f"--hardware={PROFILE}", f"--host-ram-gib={demo['host_ram_gib']}", f"--out={out}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    receipt = json.loads((out / "receipt.json").read_text())
    return {"done": done, "receipt": receipt, "settings": settings, "folder": out,
            "capacity": {v["check"]: v for v in receipt["capacity"]}}


# --- the layout, derived from config.json alone -------------------------------------------------------------

def expected_tensor(name: str, c: dict) -> tuple[str, str, tuple[int, ...]]:
    """(family, dtype, shape) a tensor name must have, from the config's dimensions; KeyError if unknown."""
    h, blk, mx = c["hidden_size"], 128, c["quantization_config"]["mxfp4_block_size"]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return "embed_head", "BF16", (c["vocab_size"], h)
    m = re.fullmatch(r"model\.(?:(mtp\.)?layers\.(\d+)\.)?(.+)", name)
    assert m is not None, name
    mtp, layer, rest = m[1] is not None, int(m[2]) if m[2] else None, m[3]
    sliding = mtp or (layer is not None and c["hybrid_layer_pattern"][layer] == 1)
    pre = "swa_" if sliding else ""
    heads, kv, kd, vd = (c[f"{pre}num_attention_heads"], c[f"{pre}num_key_value_heads"], c[f"{pre}head_dim"],
                         c[f"{pre}v_head_dim"])
    qkv_rows, shards = heads * kd + kv * (kd + vd), c["num_key_value_heads"]
    if re.fullmatch(r"norm\.weight|.*layernorm\.weight|[eh]norm\.weight", rest):
        return "norm", "BF16", (h,)
    inter, moe_inter = c["intermediate_size"], c["moe_intermediate_size"]
    table = {
        "self_attn.qkv_proj.weight": ("qkv", "F8_E4M3", (qkv_rows, h)),
        "self_attn.qkv_proj.weight_scale_inv": ("qkv", "F32", (shards * -(-qkv_rows // shards // blk), h // blk)),
        "self_attn.o_proj.weight": ("o_proj", "BF16", (h, heads * vd)),
        "self_attn.attention_sink_bias": ("sink", "BF16", (heads,)),
        "eh_proj.weight": ("eh_proj", "BF16", (h, 2 * h)),
        "mlp.gate.weight": ("router", "BF16", (c["n_routed_experts"], h)),
        "mlp.gate.e_score_correction_bias": ("router", "F32", (c["n_routed_experts"],)),
        "mlp.gate_proj.weight": ("dense_mlp", "F8_E4M3", (inter, h)),
        "mlp.up_proj.weight": ("dense_mlp", "F8_E4M3", (inter, h)),
        "mlp.down_proj.weight": ("dense_mlp", "F8_E4M3", (h, inter)),
        "mlp.gate_proj.weight_scale_inv": ("dense_mlp", "F32", (inter // blk, h // blk)),
        "mlp.up_proj.weight_scale_inv": ("dense_mlp", "F32", (inter // blk, h // blk)),
        "mlp.down_proj.weight_scale_inv": ("dense_mlp", "F32", (h // blk, inter // blk)),
    }
    if rest in table:
        return table[rest]
    e = re.fullmatch(r"mlp\.experts\.(\d+)\.(gate|up|down)_proj\.(weight|weight_scale)", rest)
    if e is None or int(e[1]) >= c["n_routed_experts"]:
        raise KeyError(name)
    rows, cols = (h, moe_inter) if e[2] == "down" else (moe_inter, h)
    return "experts", "U8", (rows, cols // 2) if e[3] == "weight" else (rows, cols // mx)


def expected_counts(c: dict) -> dict[str, int]:
    """How many tensors of each family the config implies."""
    n, mtp, experts = c["num_hidden_layers"], c["num_nextn_predict_layers"], c["n_routed_experts"]
    moe_layers = sum(1 for f in c["moe_layer_freq"] if f)
    sliding = sum(1 for p in c["hybrid_layer_pattern"] if p == 1)
    sinks = (sliding + mtp) * c["add_swa_attention_sink_bias"] + (n - sliding) * c["add_full_attention_sink_bias"]
    return {"embed_head": 2, "norm": 1 + 2 * n + 5 * mtp, "qkv": 2 * (n + mtp), "o_proj": n + mtp, "sink": sinks,
            "eh_proj": mtp, "router": 2 * moe_layers, "dense_mlp": 6 * (n - moe_layers + mtp),
            "experts": moe_layers * experts * 6}


def nbytes(dtype: str, shape) -> int:
    return math.prod(shape) * BYTES_PER_ELEMENT[dtype]


def expected_totals(c: dict) -> dict:
    """Routed-expert bytes as MoE layers x experts x (gate + up + down blocks and scales); embeddings + head."""
    h, i, mx = c["hidden_size"], c["moe_intermediate_size"], c["quantization_config"]["mxfp4_block_size"]
    moe_layers = sum(1 for f in c["moe_layer_freq"] if f)
    per_expert = 2 * (i * h // 2 + i * h // mx) + (h * i // 2 + h * i // mx)  # gate + up + down, blocks + scales
    return {"experts": moe_layers * c["n_routed_experts"] * per_expert,
            "embed_head": 2 * c["vocab_size"] * h * 2}


def expected_kv_bytes(c: dict, context: int, chunk: int, dtype_bytes: int, block: int = 16) -> int:
    """KV of one sequence: full layers keep the context; sliding layers what vLLM reserves (window - 1 + chunk)."""
    full = [p for p in c["hybrid_layer_pattern"] if p == 0]
    per_full = c["num_key_value_heads"] * (c["head_dim"] + c["v_head_dim"]) * dtype_bytes
    per_swa = c["swa_num_key_value_heads"] * (c["swa_head_dim"] + c["swa_v_head_dim"]) * dtype_bytes
    swa_layers = c["num_hidden_layers"] - len(full)
    reserved = (math.ceil(min(c["sliding_window"] - 1 + chunk, context) / block) + 1) * block
    return len(full) * per_full * math.ceil(context / block) * block + swa_layers * per_swa * max(reserved, 128)


def index_of(root: Path) -> dict:
    return json.loads((root / "model.safetensors.index.json").read_text())


# --- the generator ------------------------------------------------------------------------------------------

def test_generator_takes_seconds_and_under_50_mb_of_real_disk(demo):
    allocated = sum(p.stat().st_blocks * 512 for p in demo["root"].rglob("*") if p.is_file())
    apparent = sum(p.stat().st_size for p in demo["root"].glob("*.safetensors"))
    assert demo["wall_s"] < 30, f"the generator took {demo['wall_s']:.1f} s"
    assert allocated < 50 * 10**6, f"{allocated:,} bytes really allocated"
    assert apparent > 150 * GIB  # the shards claim their full size; the data regions are holes


def test_every_shard_is_read_by_the_safetensors_package(demo):
    c, weight_map = demo["config"], index_of(demo["root"])["weight_map"]
    seen: dict[str, int] = {}
    for shard in sorted(set(weight_map.values())):
        with safe_open(demo["root"] / shard, "numpy") as f:
            assert f.metadata()["onegpu.synthetic"] == "header-only: no weights"
            for key in f.keys():
                assert weight_map.pop(key) == shard
                family, dtype, shape = expected_tensor(key, c)
                piece = f.get_slice(key)  # numpy cannot hold F8; the slice still reports dtype and shape
                assert (piece.get_dtype(), tuple(piece.get_shape())) == (dtype, shape), key
                seen[family] = seen.get(family, 0) + 1
    assert weight_map == {}  # every tensor the index names is in its shard
    assert seen == expected_counts(demo["config"])


def test_index_total_size_is_the_sum_of_tensor_bytes(demo):
    index, c = index_of(demo["root"]), demo["config"]
    assert index["metadata"]["total_size"] == sum(nbytes(*expected_tensor(n, c)[1:]) for n in index["weight_map"])
    shards = len(set(index["weight_map"].values()))
    assert shards == math.ceil(index["metadata"]["total_size"] / 5e9)  # ~5 GB files, like a real release


def test_parameter_count_is_the_published_one(demo):
    params = 0
    for name in index_of(demo["root"])["weight_map"]:
        _, dtype, shape = expected_tensor(name, demo["config"])
        if not name.endswith(("_scale", "_scale_inv")):  # scales are block metadata, not parameters
            params += math.prod(shape) * (2 if dtype == "U8" else 1)  # a U8 block byte holds two E2M1 values
    assert abs(params / demo["params"] - 1) < 0.02, f"{params:,} parameters"


def test_config_is_the_published_reconstruction_and_the_tokenizer_a_placeholder(demo):
    assert json.loads((demo["root"] / "config.json").read_text()) == demo["config"]
    tokenizer = json.loads((demo["root"] / "tokenizer_config.json").read_text())
    assert "placeholder" in tokenizer["onegpu.placeholder"]
    assert json.loads((demo["root"] / "tokenizer.json").read_text())["model"]["vocab"] == {}


def test_generator_refuses_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "precious.txt").write_text("not a demo")
    done, _ = generate("flash", tmp_path)
    assert done.returncode != 0
    assert "was not written by this script" in done.stderr
    assert (tmp_path / "precious.txt").read_text() == "not a demo"


# --- the scan against the research target -------------------------------------------------------------------

def test_demo_scan_exits_zero_and_shows_the_plan(scan):
    out = scan["done"].stdout
    assert scan["done"].returncode == 0, out[-3000:] + scan["done"].stderr[-2000:]
    for shown in ("onegpu capacity, vLLM 0.34 accounting (ASSUMED)", "routed experts", "GPU part of weights", "host RAM",
                  "KV cache", "offload plan", "pinned in RAM cap", "repack after load", "HARDWARE FACTS REPLAYED"):
        assert shown in out


def test_terminal_and_receipt_say_the_checkpoint_is_synthetic(scan):
    assert f"*** {SYNTHETIC_BANNER}" in scan["done"].stdout
    assert any(b.startswith(SYNTHETIC_BANNER) for b in scan["receipt"]["banners"])
    assert scan["receipt"]["checkpoint"]["synthetic"] is True


def test_report_says_the_checkpoint_is_synthetic(scan):
    assert SYNTHETIC_BANNER in (scan["folder"] / "report.html").read_text()


def test_receipt_checkpoint_summary_matches_the_config(scan, demo):
    c, ckpt = demo["config"], scan["receipt"]["checkpoint"]
    by_dtype: dict[str, int] = {}
    by_family: dict[str, int] = {}
    mtp = 0
    for name in index_of(demo["root"])["weight_map"]:
        family, dtype, shape = expected_tensor(name, c)
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes(dtype, shape)
        by_family[family] = by_family.get(family, 0) + nbytes(dtype, shape)
        mtp += nbytes(dtype, shape) if ".mtp." in name else 0
    totals = expected_totals(c)
    assert by_family["experts"] == totals["experts"] and by_family["embed_head"] == totals["embed_head"]
    total = sum(by_dtype.values())
    assert ckpt["tensor_count"] == sum(expected_counts(c).values())
    assert (ckpt["weight_bytes"], ckpt["index_total_size"]) == (total, total)
    assert ckpt["bytes_by_dtype"] == by_dtype
    assert ckpt["bytes_by_role"] == {"routed_experts": totals["experts"], "embeddings_head": totals["embed_head"],
                                     "shared_dense": total - totals["experts"] - totals["embed_head"]}
    assert ckpt["quant"]["store_dtype"] == "mxfp4" and len(ckpt["shards"]) == len(set(
        index_of(demo["root"])["weight_map"].values()))
    assert scan["capacity"]["weights"]["numbers"]["mtp_bytes"] == mtp


def engine_offload(c: dict, weight_map: dict, budget: int) -> dict:
    """vLLM 0.33's UVA offload of the MiMo-V2 decoder, derived here from config.json and the tensor shapes.

    Per layer, in the order MiMoV2FlashDecoderLayer registers its modules: the attention (the sliding-window
    layers' own sink first, qkv_proj weight and block scales, o_proj, then the Attention's four 4-byte fp8 KV
    scales), the MLP (MoE layers: router gate weight and score bias, then the experts stacked per layer as
    Mxfp4MoEMethod registers them, w13 weight, w13 scale, w2 weight, w2 scale; dense layers: gate_up_proj and
    down_proj with their scales), the two norms. Parameters move whole while the running total is below the budget;
    each pinned buffer is rounded up to a power of two; MTP layers are neither built nor offloaded."""
    size = {n: nbytes(*expected_tensor(n, c)[1:]) for n in weight_map}
    params = []
    for i in range(c["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        sliding = c["hybrid_layer_pattern"][i] == 1
        attn = ([size[pre + "self_attn.attention_sink_bias"]] if sliding and c["add_swa_attention_sink_bias"] or
                not sliding and c["add_full_attention_sink_bias"] else [])
        attn += [size[pre + "self_attn.qkv_proj.weight"], size[pre + "self_attn.qkv_proj.weight_scale_inv"],
                 size[pre + "self_attn.o_proj.weight"], 4, 4, 4, 4]
        if c["moe_layer_freq"][i]:
            experts = range(c["n_routed_experts"])

            def stacked(projs, suffix):
                return sum(size[f"{pre}mlp.experts.{e}.{p}.{suffix}"] for e in experts for p in projs)
            mlp = [size[pre + "mlp.gate.weight"], size[pre + "mlp.gate.e_score_correction_bias"]]
            routed = [stacked(("gate_proj", "up_proj"), "weight"), stacked(("gate_proj", "up_proj"), "weight_scale"),
                      stacked(("down_proj",), "weight"), stacked(("down_proj",), "weight_scale")]
        else:
            mlp = [size[pre + "mlp.gate_proj.weight"] + size[pre + "mlp.up_proj.weight"],
                   size[pre + "mlp.gate_proj.weight_scale_inv"] + size[pre + "mlp.up_proj.weight_scale_inv"],
                   size[pre + "mlp.down_proj.weight"], size[pre + "mlp.down_proj.weight_scale_inv"]]
            routed = []
        norms = [size[pre + "input_layernorm.weight"], size[pre + "post_attention_layernorm.weight"]]
        params += [(n, False) for n in attn + mlp] + [(n, True) for n in routed] + [(n, False) for n in norms]
    moved = pinned = peak = count = experts_moved = 0
    for p, routed_expert in params:
        if moved >= budget:
            break
        moved, pinned, count = moved + p, pinned + (1 << (p - 1).bit_length()), count + 1
        experts_moved += p if routed_expert else 0
        peak = max(peak, pinned + p)  # the pageable copy of the parameter being pinned
    kv_scales = 4 * 4 * c["num_hidden_layers"]  # engine parameters no tensor fills
    mtp = sum(v for n, v in size.items() if ".mtp." in n)
    return {"offloaded": moved, "pinned": pinned, "peak": peak, "parameters": count,
            "loaded": sum(size.values()) - mtp + kv_scales, "mtp": mtp, "experts_offloaded": experts_moved,
            "dense_offloaded": moved - experts_moved}


def test_receipt_capacity_matches_the_config_and_the_settings(scan, demo):
    c, s, cap = demo["config"], scan["settings"], scan["capacity"]
    weight_map = index_of(demo["root"])["weight_map"]
    total = sum(nbytes(*expected_tensor(n, c)[1:]) for n in weight_map)
    gpu_total = json.loads(PROFILE.read_text())["gpu"]["devices"][s["gpu"]]["total_bytes"]
    budget = math.ceil(gpu_total * 0.85) - s["gpu_reserve_gib"] * GIB
    engine = engine_offload(c, weight_map, s["cpu_offload_gib"] * GIB)
    resident = engine["loaded"] - engine["offloaded"]
    assert engine["loaded"] == total - engine["mtp"] + 16 * c["num_hidden_layers"]
    kv = scan["receipt"]["kv_cache"]["bytes"]  # onegpu.plan.kvcache's figure; the capacity sums it with the weights
    assert cap["gpu_budget"]["numbers"]["budget_bytes"] == budget
    assert cap["gpu_weights"]["numbers"]["gpu_resident_bytes"] == resident
    assert cap["kv_cache"]["numbers"]["kv_bytes"] == kv
    assert cap["kv_cache"]["numbers"]["need_bytes"] == resident + kv
    pinned_need = engine["peak"] + CONTAINER_OWN_NEEDS
    ram_cap, headroom = s["container_ram_gib"] * GIB, s["host_headroom_gib"] * GIB
    host = cap["host_offload"]["numbers"]
    assert (host["offloaded_bytes"], host["pinned_bytes"], host["peak_bytes"], host["need_bytes"]) == (
        engine["offloaded"], engine["pinned"], engine["peak"], pinned_need)
    assert cap["host_ram"]["numbers"]["need_bytes"] == max(ram_cap, pinned_need) + headroom
    assert cap["host_ram"]["numbers"]["host_available_bytes"] == demo["host_ram_gib"] * GIB
    assert {k: cap[k]["status"] for k in ("gpu_weights", "kv_cache")} == {"gpu_weights": "OK", "kv_cache": "OK"}
    # the host verdicts follow the pinned need, not the budget (the Pro demo's 480 GiB pins 849 GiB)
    assert cap["host_offload"]["status"] == ("BLOCKED" if pinned_need > ram_cap else "OK")
    assert cap["host_ram"]["status"] == (
        "BLOCKED" if max(ram_cap, pinned_need) + headroom > demo["host_ram_gib"] * GIB else "OK")


def test_offload_plan_and_pinned_figure_match_the_engine_order(scan, demo):
    """The plan's figures are the ones derived above from config.json, and it names its accounting and rules."""
    c, s = demo["config"], scan["settings"]
    engine = engine_offload(c, index_of(demo["root"])["weight_map"], s["cpu_offload_gib"] * GIB)
    plan = scan["capacity"]["offload_plan"]
    assert (plan["numbers"]["offloaded_bytes"], plan["numbers"]["pinned_rounded_bytes"],
            plan["numbers"]["parameters"]) == (engine["offloaded"], engine["pinned"], engine["parameters"])
    # the demo's settings name no vLLM version and no probe ran: the newest rules, ASSUMED, and the plan says so
    label = "vLLM 0.34 accounting (ASSUMED)"
    assert plan["status"] == "OK" and plan["message"].startswith(f"{label}: on the CPU: decoder layers 0-")
    assert f"'Total CPU offloaded parameters: {round(engine['offloaded'] / GIB, 2)}'" in plan["message"]
    assert scan["capacity"]["repack"]["status"] == "UNKNOWN"  # the MXFP4 backend is picked on the card at load
    accounting = scan["receipt"]["capacity_accounting"]
    assert accounting["accounting"] == label and accounting["version"]["basis"] == "ASSUMED"
    assert all(rule["sources"] for rule in accounting["rules"])
    report = (scan["folder"] / "report.html").read_text()
    assert f"{label}: the rules and where vLLM states them" in report
    assert "extensible_kv_cache.py:measure_kv_cache_bytes" in report  # 0.34's KV sizing rules, with their sources
    assert "uva.py:UVAOffloader._maybe_offload_to_cpu" in report
    # the KV rules sit beside the offload rules, and the KV section names the accounting and its pool arithmetic
    assert {"kv_groups", "kv_request", "kv_null_block"} <= {rule["rule"] for rule in accounting["rules"]}
    assert "SlidingWindowSpec.max_admission_blocks_per_request" in report
    kv = scan["receipt"]["kv_cache"]
    assert kv["accounting"] == label and kv["pool"]["async_scheduling"] is True and kv["pool"]["block_size"] == 64
    assert f"KV cache for one sequence, {label}: " in report and "padding slots" in report


# The public figures the link ceiling is checked against: the routed experts one token touches in all layers (about
# 11 GB for Pro, 5 GB for Flash) and pinned host-to-device copies on PCIe 5.0 x16 (about 56 GB/s, nvbandwidth).
TOKEN_EXPERT_GB = {"pro": 11.0, "flash": 5.0}
GEN5_X16_GBPS = 56.0


def test_the_link_ceiling_counts_the_bytes_derived_from_the_config(scan, demo):
    """A one-token step reads every offloaded dense parameter whole and top-k of n_routed_experts of each offloaded
    expert tensor; a 4,096-token chunk reads every offloaded byte; the research target's PCIe 5.0 x16 link is
    ASSUMED at the public 56 GB/s, NOT MEASURED (the hardware is replayed)."""
    c, s = demo["config"], scan["settings"]
    engine = engine_offload(c, index_of(demo["root"])["weight_map"], s["cpu_offload_gib"] * GIB)
    experts, k = c["n_routed_experts"], c["num_experts_per_tok"]
    one_token = engine["dense_offloaded"] + math.ceil(Fraction(engine["experts_offloaded"] * k, experts))
    ceiling = scan["receipt"]["ceiling"]
    assert (ceiling["traffic"]["experts"], ceiling["traffic"]["top_k"]) == (experts, k)
    assert (ceiling["traffic"]["expert_bytes"], ceiling["traffic"]["dense_bytes"]) == (
        engine["experts_offloaded"], engine["dense_offloaded"])
    assert ceiling["step_bytes"]["1"] == one_token
    assert ceiling["chunk_bytes"] == engine["offloaded"]  # 4,096 tokens x 8 reach all experts of every layer
    link = ceiling["link"]
    assert (link["basis"], link["gen"], link["width"]) == ("ASSUMED", 5, 16)
    assert link["gbps"] == pytest.approx(GEN5_X16_GBPS, rel=0.001) and "NOT MEASURED" in link["not_measured"]
    assert ceiling["decode_tps"]["1"] == pytest.approx(link["gbps"] * 1e9 / one_token)
    assert ceiling["prefill_tps"] == pytest.approx(4096 * link["gbps"] * 1e9 / engine["offloaded"])
    # the whole model's routed experts a token touches: the public figure, to 10 %
    touched = expected_totals(c)["experts"] * k / experts
    assert touched / 1e9 == pytest.approx(TOKEN_EXPERT_GB[demo["model"]], rel=0.1)
    out = scan["done"].stdout
    assert "UPPER BOUND decode, one sequence" in out and "at most " in out
    assert ceiling["label"] == "UPPER BOUNDS, never predictions"


def test_replayed_demo_shows_the_docker_run_line_with_the_image_left_to_the_approval(scan):
    rows, s = scan["done"].stdout.splitlines(), scan["settings"]
    line = next(row for row in rows if "as CLI" in row and "docker run --pull=never" in row)
    assert f"--mount type=bind,source={s['model_path']},target=/model,readonly" in line
    assert f"--entrypoint vllm {s['image']} serve /model" in line  # the reference: no ID can be read in a replay
    for flag in (f"--cpu-offload-gb {s['cpu_offload_gib']:g}", f"--max-model-len {s['context_tokens']}",
                 "--network none", f"--memory {s['container_ram_gib'] * GIB}b"):
        assert flag in line
    assert any(row.lstrip().startswith("note") and "approval" in row for row in rows)


# --- the same Pro checkpoint under the 2-GPU protocol, on the two-card tower -------------------------------

def test_the_pro_demo_under_the_two_gpu_protocol_is_planned_per_rank_and_labelled(tmp_path):
    root = tmp_path / "MiMo-V2.6-Pro"
    done, _ = generate("pro", root)
    assert done.returncode == 0, done.stdout + done.stderr
    settings_path = root.with_name("MiMo-V2.6-Pro.tp2.settings.json")
    assert json.loads(settings_path.read_text())["model_path"] == str(root)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    scan = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--settings={settings_path}",
                           f"--hardware={PROFILES / 'two-card-tower-rtx-pro-6000-96gb.json'}", "--host-ram-gib=768",
                           f"--out={out}"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert scan.returncode == 0, scan.stdout[-3000:] + scan.stderr[-3000:]
    label = "2-GPU protocol (TP 2 x PP 1)"
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["selection"]["protocol"] == label and f"MULTI-GPU: {label}" in scan.stdout
    tests = {nodeid.split("::")[-1]: entry for nodeid, entry in receipt["tests"].items()}
    assert tests["test_peer_access_is_enabled_between_the_gpus"]["code"] == "P2P_DISABLED"  # the driver's default
    # Each rank holds half of the embedding and of the head, the vocabulary padded to a multiple of 64 first.
    c = json.loads((EXAMPLES / "configs" / "MiMo-V2.6-Pro.config.json").read_text())
    half_padded_vocab = -(-c["vocab_size"] // 64) * 64 // 2
    capacity = {v["check"]: v for v in receipt["capacity"]}
    ranks = capacity["offload_plan"]["numbers"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["embeddings_head_bytes"] == 2 * half_padded_vocab * c["hidden_size"] * 2 for r in ranks)
    assert all(r["first_layer"] == 0 and r["end_layer"] is None for r in ranks)  # one stage: every layer
    # Each worker offloads up to its own 200 GiB; the host checks add both workers.
    assert capacity["offload_plan"]["numbers"]["budget_bytes"] == 200 * GIB
    # (vLLM's offloader takes whole parameters until it reaches the budget; TP halves are equal on both ranks)
    assert ranks[0]["offloaded_bytes"] == ranks[1]["offloaded_bytes"] >= 200 * GIB
    assert capacity["offload_plan"]["numbers"]["pinned_bytes"] == sum(r["pinned_bytes"] for r in ranks)
    summary = (out / "summary-share.md").read_text()
    assert f"{label}, not a one-GPU result" in summary and "one GPU: " not in summary

"""vLLM 0.34's extensible KV cache at READY against the plan's 0.34 prediction (onegpu.plan.landing_kv).

The boot lines are built from 0.34.0's own format strings (vllm/v1/worker/extensible_kv_cache.py:694 "Memory after
warmup: ..." and :537 "Extended KV cache to %d blocks (%.2f GiB)."; format_gib is f"{round(b / GiB, 2)}"); the
plan's figures come from the kit's capacity verdicts of a real estimate, so a wrong bytes-per-block shows."""
import math

from onegpu.core.jsonable import to_json
from onegpu.engine.bootlog import parse_boot_log
from onegpu.plan.capacity import capacity_verdicts
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.landing import landing_lines, landing_record, projection_from_plan
from onegpu.plan.vllm_versions import DECLARED, accounting_for
from tests_offline.capacity_facts import LLAMA_CONFIG, checkpoint_facts, gpu_device, host, layers_table, settings_with

GIB = 2**30
V034 = accounting_for("0.34.0", DECLARED, "test")
V033 = accounting_for("0.33.0", DECLARED, "test")


def format_gib(b: int) -> str:  # vllm/utils/mem_utils.py:format_gib (0.34.0)
    return f"{round(b / GIB, 2)}"


def plan_rows(accounting):
    settings = settings_with()
    ckpt = checkpoint_facts(layers_table(10, 4))
    kv = kv_cache_estimate(LLAMA_CONFIG, settings.context_tokens, None, settings.prefill_chunk_tokens,
                           accounting=accounting)
    verdicts = capacity_verdicts(settings, gpu_device(), host(), ckpt, kv, 50 * GIB, accounting=accounting)
    return verdicts, kv


def boot_log(blocks: int, per_block: int, segments: int, requested: int, transient: int, tokens: int,
             context: int) -> str:
    fit = blocks * per_block
    physical = segments * math.ceil(blocks * per_block / segments / (2 << 20)) * (2 << 20)
    warm = ("Memory after warmup: %s GiB free, %s GiB committed to the KV cache, %s GiB kept for transient "
            "activations (%s GiB allocated at peak, %s GiB of torch reservation growth); %d KV cache blocks (%s GiB) "
            "fit within the requested %s GiB. Torch may reserve up to %s GiB."
            % (format_gib(fit + 20 * GIB), format_gib(2 << 20), format_gib(transient), format_gib(transient),
               format_gib(transient // 2), blocks, format_gib(fit), format_gib(requested), format_gib(12 * GIB)))
    extended = "Extended KV cache to %d blocks (%.2f GiB)." % (blocks, physical / GIB)
    kv_line = ("GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
               % (f"{tokens:,}", f"{context:,}", tokens / context))
    return "\n".join(f"(EngineCore pid=9) INFO 11-20 10:00:0{i} [extensible_kv_cache.py:694] {m}"
                     for i, m in enumerate((warm, extended, kv_line)))


def test_the_logged_034_figures_are_what_the_plan_predicts():
    rows, kv = plan_rows(V034)
    pool = kv.pool
    blocks, context = 3_000, kv.context_tokens
    tokens = int(blocks / pool.blocks_per_request * context)
    requested = math.ceil(gpu_device().total_bytes * 0.85)
    log = boot_log(blocks, pool.bytes_per_block, pool.layers_per_group, requested, 3 * GIB, tokens, context)
    boot = to_json(parse_boot_log(log))
    record = landing_record(projection_from_plan(rows), boot, None, 2 * GIB, True)
    check = {r["quantity"]: r for r in record["kv_after_warmup"]["rows"]}
    assert check["bytes of the blocks that fit"]["status"] == "agrees"
    assert check["requested budget"]["status"] == "agrees"
    assert check["transient memory kept free"]["status"] == "within the reserve"  # 3 GiB under the assumed 8 GiB
    assert check["KV cache committed"]["status"] == "within"
    assert check["KV cache tokens"] == {**check["KV cache tokens"], "measured": tokens, "projected": tokens,
                                        "status": "agrees"}
    assert record["kv_after_warmup"]["contradiction"] is None and not record["warnings"]
    # the committed bytes, not the estimate, are the measured pool
    assert record["measured"]["kv_pool_bytes"] == round(boot["kv_extended_gib"] * GIB)
    assert any(line.startswith("landing after warmup, bytes of the blocks that fit (vLLM 0.34 accounting)")
               for line in landing_lines(record))


def test_a_wrong_bytes_per_block_and_a_larger_transient_are_flagged():
    rows, kv = plan_rows(V034)
    pool = kv.pool
    requested = math.ceil(gpu_device().total_bytes * 0.85)
    log = boot_log(3_000, pool.bytes_per_block * 2, pool.layers_per_group, requested, 9 * GIB, 1, kv.context_tokens)
    record = landing_record(projection_from_plan(rows), to_json(parse_boot_log(log)), None, 2 * GIB, True)
    check = {r["quantity"]: r for r in record["kv_after_warmup"]["rows"]}
    assert check["bytes of the blocks that fit"]["status"] == "DIFFERS"
    assert check["KV cache committed"]["status"] == "OUTSIDE"
    assert check["transient memory kept free"]["status"] == "ABOVE THE RESERVE"
    assert check["KV cache tokens"]["status"] == "DIFFERS"
    assert sum("after warmup" in w for w in record["warnings"]) == 4


def test_034_lines_under_a_plan_for_an_estimating_version_are_a_contradiction():
    rows, kv = plan_rows(V033)
    log = boot_log(100, kv.pool.bytes_per_block, kv.pool.layers_per_group, GIB, GIB, 1, kv.context_tokens)
    record = landing_record(projection_from_plan(rows), to_json(parse_boot_log(log)), None, 2 * GIB, True)
    assert "plan applied vLLM 0.33 accounting" in record["kv_after_warmup"]["contradiction"]
    assert any("CONTRADICTION" in line for line in landing_lines(record))


def test_a_log_without_034_lines_has_no_such_check():
    rows, _ = plan_rows(V033)
    boot = to_json(parse_boot_log("INFO 11-20 10:00:00 [gpu_worker.py:760] Available KV cache memory: 10.0 GiB"))
    assert landing_record(projection_from_plan(rows), boot, None, 2 * GIB, True)["kv_after_warmup"] is None

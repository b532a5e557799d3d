"""Phase 2, the plan: settings, checkpoint headers, image ID and capacity verdicts. Read-only."""
import pytest

from onegpu.plan.approved import describe_agreement, describe_checkpoint, describe_settings, require_revision
from onegpu.plan.capacity import describe_weights
from onegpu.plan.kvcache import describe_kv
from onegpu.plan.vllm_versions import describe_accounting

pytestmark = [pytest.mark.scan, pytest.mark.phase("plan")]


def test_settings_are_valid_and_assumptions_shown(settings, fact):
    fact(describe_settings, settings)


def test_checkpoint_is_present_and_complete(checkpoint, fact):
    fact(describe_checkpoint, checkpoint)


def test_checkpoint_is_the_revision_the_settings_name(checkpoint, settings, fact):
    fact(require_revision, checkpoint, settings)


def test_index_and_headers_agree(checkpoint, fact):
    fact(describe_agreement, checkpoint)


def test_weights_by_dtype_and_role_are_shown(checkpoint, fact):
    fact(describe_weights, checkpoint)


def test_quantization_is_recognised(judge_capacity):
    judge_capacity("quantization")


def test_image_resolves_to_an_immutable_id(image):
    assert image.id.startswith("sha256:") and len(image.id) == 71


def test_vllm_version_whose_rules_the_plan_applies_is_named(accounting, fact):
    fact(describe_accounting, accounting)


def test_kv_cache_for_the_context_is_estimated(kv_estimate, fact):
    fact(describe_kv, kv_estimate)


def test_gpu_has_the_free_memory_vllm_demands_at_start(selected_gpu, judge_capacity):
    judge_capacity("gpu_free")


def test_gpu_budget_is_left_after_the_non_weight_reserve(selected_gpu, judge_capacity):
    judge_capacity("gpu_budget")


def test_weights_left_on_the_gpu_stay_within_the_budget(selected_gpu, judge_capacity):
    judge_capacity("gpu_weights")


def test_kv_cache_stays_within_what_the_weights_leave(selected_gpu, judge_capacity):
    judge_capacity("kv_cache")


def test_offload_lands_where_the_engine_puts_it(judge_capacity):
    judge_capacity("offload_plan")


def test_pinned_offload_stays_within_the_container_ram_cap(judge_capacity):
    judge_capacity("host_offload")


def test_ram_cap_and_headroom_stay_within_host_ram(judge_capacity):
    judge_capacity("host_ram")


def test_ram_cap_and_headroom_stay_within_the_kit_cgroup(judge_capacity):
    judge_capacity("cgroup")


def test_repack_after_loading_is_known_or_shown_unknown(judge_capacity):
    judge_capacity("repack")


def test_run_folder_has_disk_for_the_evidence(judge_capacity):
    judge_capacity("disk")


def test_plan_is_written_with_its_digest(plan, kit):
    assert (kit.run_folder / "plan.json").stat().st_mode & 0o777 == 0o600
    assert kit.receipt.data["plan"]["sha256"]

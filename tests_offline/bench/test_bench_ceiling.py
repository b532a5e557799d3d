"""The ceiling benchmark's cases are what its table says they are: the demo's own settings, every decoder layer,
and the same budget spent on the routed experts only (nothing dense offloaded, the experts under the budget)."""
from __future__ import annotations

from benchmarks.bench_ceiling import cases, demo
from onegpu.checkpoint.scan import read_checkpoint
from onegpu.plan.ceiling import is_routed_expert
from onegpu.plan.settings import load_settings

GIB = 2**30


def test_the_three_cases_offload_what_their_names_say(tmp_path):
    folder, settings_path = demo("flash", tmp_path)
    ckpt, settings = read_checkpoint(folder), load_settings(settings_path)
    own, every, experts = cases(ckpt, settings).values()
    assert own.budget_bytes == settings.cpu_offload_gib * GIB
    assert every.offloaded_bytes == every.offerable_bytes > own.offloaded_bytes
    assert experts.offloaded and all(is_routed_expert(p.local) for p in experts.offloaded)
    # whole parameters move until the budget is crossed: the last one crosses it, the ones before stay under
    assert experts.offloaded_bytes - experts.offloaded[-1].nbytes < settings.cpu_offload_gib * GIB \
        <= experts.offloaded_bytes

"""Pure: the host side of the capacity verdicts (KIT.md 5): what the engine container pins and peaks at against its
RAM cap, the host's RAM and the kit's cgroup limit with the operator's headroom, and the run folder's disk. The
GPU side and the table are onegpu.plan.capacity's."""
from __future__ import annotations

from onegpu.core.units import GIB, gib
from onegpu.machine.model import HostFacts
from onegpu.plan.offload import OffloadPlan
from onegpu.plan.repack import NONE as NO_REPIN
from onegpu.plan.repack import RepinCost, repin_short
from onegpu.plan.verdict import Verdict
from onegpu.plan.verdict import blocked as _blocked
from onegpu.plan.verdict import ok as _ok
from onegpu.plan.verdict import unknown as _unknown
from onegpu.plan.vllm_versions import Accounting, assumed_newest

# Named assumption: what the engine container needs for itself besides the offloaded weights (engine process,
# tokenizer, CUDA host context, Python heap). Shown as ASSUMED wherever it is used.
CONTAINER_OWN_NEEDS_BYTES = 8 * GIB
OWN_NEEDS_TEXT = (f"{gib(CONTAINER_OWN_NEEDS_BYTES)} ASSUMED for the container's own needs (engine process, "
                  "tokenizer, CUDA host context)")
RUN_FOLDER_DISK_NEED_BYTES = 1 * GIB  # engine log, responses, samples, receipt and report of one run
UNCONFIRMED = ("UNCONFIRMED: exact pinning is read from vLLM's source, not yet measured; a measured landing "
               "(container memory at READY) confirms it")


def gib_bytes(value_gib: float) -> int:
    return int(round(value_gib * GIB))


_ROUNDED_RULE = ("vLLM's default pinning: uva.py:UVAOffloader._maybe_offload_to_cpu pins each parameter and torch's "
                 "CachingHostAllocator rounds every pinned buffer up to a power of two")
_EXACT_RULE = ("offload_pinning exact: VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1, and cuda_view.cu:"
               "get_cuda_view_from_cpu_tensor pins a buffer of the parameter's own size")


def pinning_text(plan: OffloadPlan) -> str:
    if plan.pinning == "exact":
        return (f"pinned {gib(plan.pinned_exact_bytes)} at their own size ({_EXACT_RULE}; rounded it would be "
                f"{gib(plan.pinned_rounded_bytes)})")
    return f"pinned {gib(plan.pinned_rounded_bytes)}, a certain cost ({_ROUNDED_RULE})"


def _pinned_need_text(plan: OffloadPlan) -> str:
    return (f"{len(plan.offloaded)} offloaded parameters, {gib(plan.offloaded_bytes)} logical (the budget's figure), "
            f"{pinning_text(plan)}; peak while offloading {gib(plan.peak_bytes)} (pinned so far + the pageable copy "
            "of the parameter being pinned)")


def _repin_clause(repin: RepinCost, need: int, cap: int, what: str) -> str:
    """How a repack's re-pin stands against a cap: counted when certain, shown with its effect when possible."""
    if repin.certainty is None:
        return ""
    if repin.certainty == "certain":
        return f"; counted: {repin_short(repin)}"
    after = need + repin.bytes
    effect = (f"would exceed the {what} {gib(cap)} by {gib(after - cap)}" if after > cap
              else f"would still fit the {what} {gib(cap)}")
    return f"; not counted: {repin_short(repin)}: with it {gib(after)}, which {effect}"


def host_offload(plan: OffloadPlan, cap: int, own_needs: int = CONTAINER_OWN_NEEDS_BYTES,
                  own_text: str = OWN_NEEDS_TEXT, accounting: Accounting | None = None,
                  repin: RepinCost = NO_REPIN) -> Verdict:
    """The container's RAM cap against what it must hold; `own_needs` and `own_text` name the ASSUMED needs of
    the engine's own processes (one engine process by default); a repack's re-pin is counted when certain."""
    accounting = accounting or assumed_newest()
    room = cap - own_needs
    need = plan.peak_bytes + own_needs + (repin.bytes if repin.certainty == "certain" else 0)
    nums = dict(offloaded_bytes=plan.offloaded_bytes, pinned_bytes=plan.pinned_bytes,
                pinned_rounded_bytes=plan.pinned_rounded_bytes, pinned_exact_bytes=plan.pinned_exact_bytes,
                peak_bytes=plan.peak_bytes, pinning=plan.pinning, pinning_confirmed=plan.pinning == "rounded",
                container_ram_cap_bytes=cap, own_needs_bytes=own_needs, room_bytes=room,
                need_bytes=need, own_needs_assumed=True, accounting=accounting.label, **repin.as_numbers())
    if not plan.offloaded:
        text = f"nothing is offloaded, nothing is pinned; RAM cap {gib(cap)} minus {own_text} leaves {gib(room)}"
        if need > cap:  # the container's own needs alone do not fit its cap
            return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                            f"the container's own needs exceed its RAM cap by {gib(need - cap)}: {text}", **nums)
        return _ok("host_offload", f"no definite failure: {text}", **nums)
    text = (f"{_pinned_need_text(plan)} + {own_text} = {gib(need)} vs RAM cap {gib(cap)}"
            f"{_repin_clause(repin, need, cap, 'RAM cap')}")
    if plan.pinning == "exact":
        text += f"; {UNCONFIRMED}"
    if need > cap:
        return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                        f"what the container must hold exceeds its RAM cap by {gib(need - cap)}: {text}", **nums)
    return _ok("host_offload", f"no definite failure: {text}", **nums)


def _host_need(cap: int, container_need: int, headroom: int) -> tuple[int, str]:
    """(bytes the host must have, how): the cap, or the pinned need where that is larger, plus the headroom."""
    if container_need > cap:
        return container_need + headroom, (f"the container's pinned need {gib(container_need)} (above its RAM cap "
                                           f"{gib(cap)}, so it counts instead) + host headroom {gib(headroom)}")
    return cap + headroom, f"RAM cap {gib(cap)} (it holds the pinned need {gib(container_need)}) + host headroom " \
                           f"{gib(headroom)}"


def host_ram(settings, host: HostFacts, cap: int, plan: OffloadPlan, container_need: int,
              repin: RepinCost = NO_REPIN) -> Verdict:
    headroom = gib_bytes(settings.host_headroom_gib)
    need, how = _host_need(cap, container_need, headroom)
    nums = dict(container_ram_cap_bytes=cap, host_headroom_bytes=headroom, need_bytes=need,
                container_need_bytes=container_need, pinned_bytes=plan.pinned_bytes,
                host_available_bytes=host.ram_available_bytes, pinning=plan.pinning, **repin.as_numbers())
    if host.ram_available_bytes is None:
        return _unknown("host_ram", f"host RAM unknown (the replayed profile leaves it unset; state it with "
                                    f"--host-ram-gib N): {how} = {gib(need)} cannot be checked", **nums)
    who = "stated by the operator" if host.ram_stated_by_operator else "available now"
    text = f"{how} = {gib(need)} vs host RAM {who} {gib(host.ram_available_bytes)}"
    if need > host.ram_available_bytes:
        text += f": short by {gib(need - host.ram_available_bytes)}"
    if repin.certainty == "possible":
        # the re-pin lands in the container: it moves the host figure only where it lifts the container above its cap
        lifted = max(cap, container_need + repin.bytes) + headroom
        if lifted > need:
            text += (f"; not counted: {repin_short(repin)}: with it the host would need {gib(lifted)}, which "
                     + (f"exceeds it by {gib(lifted - host.ram_available_bytes)}"
                        if lifted > host.ram_available_bytes else "still fits"))
    if need > host.ram_available_bytes:
        return _blocked("host_ram", "INSUFFICIENT_HOST_RAM", text, **nums)
    return _ok("host_ram", f"no definite failure: {text}", **nums)


def cgroup_limit(settings, host: HostFacts, cap: int, container_need: int) -> Verdict:
    need, how = _host_need(cap, container_need, gib_bytes(settings.host_headroom_gib))
    cg = host.cgroup
    nums = dict(need_bytes=need, container_need_bytes=container_need, cgroup_limit_bytes=cg.memory_limit_bytes,
                cgroup_path=cg.path)
    if cg.version is None:
        return _ok("cgroup", "no cgroup filesystem recorded: no cgroup memory limit known", **nums)
    if cg.memory_limit_bytes is None:
        return _ok("cgroup", f"no definite failure: cgroup v{cg.version} {cg.path} has no memory limit", **nums)
    if need > cg.memory_limit_bytes:
        return _blocked("cgroup", "CGROUP_LIMIT",
                        f"{how} = {gib(need)} exceed the memory limit {gib(cg.memory_limit_bytes)} of the kit's "
                        f"cgroup v{cg.version} {cg.path}", **nums)
    return _ok("cgroup", f"no definite failure: {how} = {gib(need)} within the cgroup v{cg.version} "
                         f"limit {gib(cg.memory_limit_bytes)}", **nums)


def run_folder_disk(free: int | None) -> Verdict:
    need = RUN_FOLDER_DISK_NEED_BYTES
    if free is None:
        return _unknown("disk", f"free disk at the run folder not recorded (a replayed profile without a run-folder "
                                f"disk): a run needs {gib(need)}", need_bytes=need)
    nums = dict(free_bytes=free, need_bytes=need)
    if free < need:
        return _blocked("disk", "DISK_FULL", f"run folder disk has {gib(free)} free; a run needs at least {gib(need)} "
                                             "(engine log, responses, samples, receipt, report)", **nums)
    return _ok("disk", f"no definite failure: {gib(free)} free at the run folder, a run needs {gib(need)}", **nums)

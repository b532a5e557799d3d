"""Pure: a proposal as people read it (the terminal's table and fact lines) and as settings-proposed.json holds it."""
from __future__ import annotations

from onegpu.core.outcomes import Blocked
from onegpu.plan.propose import (
    NOT_SETTINGS,
    PROPOSAL_SCHEMA,
    Proposal,
    ProposalRequest,
)


def proposal_table(p: Proposal) -> list[str]:
    """Rows for the terminal: quantity, value, derivation; then blockers and unknowns."""
    lines = [f"{'quantity':<30} {'value':>14}  derivation"]
    lines += [f"{q:<30} {v:>14}  {d}" for q, v, d in p.rows]
    lines += [f"BLOCKED {b['code']}: {b['message']}" for b in p.blockers]
    lines += [f"UNKNOWN: {u}" for u in p.unknown]
    lines += [f"WARNING: {w}" for w in p.warnings]
    if p.proposed:
        s = p.settings
        assert s is not None, "a proposal carries its settings"
        lines.append(f"PROPOSED (copy into your settings): cpu_offload_gib {s['cpu_offload_gib']}, container_ram_gib "
                     f"{s['container_ram_gib']}, host_headroom_gib {s['host_headroom_gib']}" + alternatives_text(p))
    return lines


def proposal_document(p: Proposal, req: ProposalRequest, created_at: str, hardware: dict, image: dict,
                      checkpoint: dict, consistency: list[dict]) -> dict:
    """settings-proposed.json: the proposal, never settings (its own schema)."""
    return {"schema": PROPOSAL_SCHEMA, "not_settings": NOT_SETTINGS, "created_at": created_at, "proposed": p.proposed,
            "settings": p.settings, "alternatives": p.alternatives, "accounting": p.accounting,
            "derivation": [{"quantity": q, "value": v, "derivation": d} for q, v, d in p.rows],
            "blockers": p.blockers, "unknown": p.unknown, "warnings": p.warnings,
            "check": [v.as_json() for v in p.check],
            "reserve": p.reserve, "request": {"path": req.path, "sha256": req.sha256, "values": req.values(),
                                              "assumed": dict(req.assumed)},
            "hardware": hardware, "image": image, "checkpoint": checkpoint, "consistency": consistency}


def alternatives_text(p: Proposal) -> str:
    if not p.alternatives:
        return ""
    return " (alternatives to measure, not results: " + "; ".join(
        f"{a['name']}: container_ram_gib {a['container_ram_gib']}" for a in p.alternatives) + ")"


def outcome_lines(p: Proposal, path) -> list[str]:
    """Fact lines of a proposal; raises Blocked (the first blocker's code) when no budget can work."""
    if p.blockers:
        first = p.blockers[0]
        raise Blocked(first["code"] or "INSUFFICIENT_VRAM",
                      "no budget can work: " + "; ".join(f"{b['check']}: {b['message']}" for b in p.blockers)
                      + alternatives_text(p) + f" (the derivation is in {path})",
                      {**first["numbers"], "blockers": len(p.blockers)})
    if not p.proposed:
        return [f"no budget proposed: {u}" for u in p.unknown] + [f"derivation written: {path}"]
    s = p.settings
    assert s is not None, "a proposal carries its settings"
    lines = [f"proposed: cpu_offload_gib {s['cpu_offload_gib']}, container_ram_gib {s['container_ram_gib']}, "
             f"host_headroom_gib {s['host_headroom_gib']} -> {path} (a proposal: copy it into your settings; nothing "
             "runs from it)"]
    lines += [f"  alternative, {a['name']}: container_ram_gib {a['container_ram_gib']} ({a['why']})"
              + (f"; link ceiling: {a['ceiling']['text']}" if a.get("ceiling") else "") for a in p.alternatives]
    return lines + [f"  UNKNOWN: {u}" for u in p.unknown] + [f"  WARNING: {w}" for w in p.warnings]

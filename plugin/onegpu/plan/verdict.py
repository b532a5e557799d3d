"""Pure: one capacity check's verdict (KIT.md 5): OK (no definite failure), BLOCKED (code) or UNKNOWN (reason)."""
from __future__ import annotations

from msgspec import Struct, field

from onegpu.core.outcomes import Blocked


class Verdict(Struct, frozen=True):
    """One capacity check: OK (no definite failure), BLOCKED (code) or UNKNOWN (reason), with its numbers."""

    check: str
    status: str  # "OK" | "BLOCKED" | "UNKNOWN"
    code: str | None
    message: str
    numbers: dict = field(default_factory=dict)

    def blocked(self) -> Blocked:
        """The Blocked outcome of a BLOCKED verdict (for the pytest layer to raise)."""
        assert self.code is not None, "a BLOCKED verdict carries its code"
        return Blocked(self.code, self.message, dict(self.numbers))

    def as_json(self) -> dict:
        return {"check": self.check, "status": self.status, "code": self.code, "message": self.message,
                "numbers": dict(self.numbers)}


def ok(check, message, **numbers) -> Verdict:
    return Verdict(check, "OK", None, message, numbers)


def blocked(check, code, message, **numbers) -> Verdict:
    return Verdict(check, "BLOCKED", code, message, numbers)


def unknown(check, message, **numbers) -> Verdict:
    return Verdict(check, "UNKNOWN", None, message, numbers)

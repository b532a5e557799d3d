"""Pure: what every receipt section's type shares."""
from __future__ import annotations

from msgspec import Struct


class Section(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A receipt section as read from receipt.json: frozen, read by attribute. Every field is optional, because
    its writer may leave a key out (and a receipt cut short, or written by an earlier session, may hold fewer):
    a key left out reads None. A key no type declares is refused: the kit writes only what its types declare."""

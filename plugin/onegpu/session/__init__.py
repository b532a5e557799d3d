"""The pytest side of a kit session: what it carries, the approval gate, Blocked as xfail, the backstop, interrupts
and the closing lines."""

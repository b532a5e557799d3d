"""The pytest side of a kit session: what it carries, the approval gate, Blocked as xfail, the backstop, what an
interruption leaves, and the closing lines."""

"""Phase 8, serve: the loopback adapter a native benchmark harness talks to, and its transport log."""

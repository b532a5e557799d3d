"""Phases 6 and 7: the canary and the frozen benchmark batch, with the request files and protocol they are bound to."""

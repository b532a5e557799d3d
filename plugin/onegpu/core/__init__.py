"""The vocabulary every phase shares: outcome codes and phases, units, JSON readers and writers, bounded values in messages."""

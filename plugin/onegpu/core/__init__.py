"""The vocabulary every phase shares: outcome codes and phases, units, JSON readers and writers, bounded values in
messages, the --kv-cache-dtype table, and the HTTP client for a Unix socket."""

"""The kit's standing limitation sentences: recorded in the receipt, and the only limitations the public summary
may quote (it quotes none it does not know)."""

GPU_LOCK = ("the per-GPU lock is an abstract Unix socket: it excludes sessions in the same network namespace "
            "on this host, not sessions inside other containers or on other hosts")

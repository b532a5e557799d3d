"""Phase 2, plan: settings, capacity in vLLM's own accounting, the KV cache, the offload, the approved plan."""

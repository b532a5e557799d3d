"""Phase 1, machine: this host's GPU (NVML), RAM, cgroup and Docker facts, read live or replayed from a profile."""

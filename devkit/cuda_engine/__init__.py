"""vLLM's CUDA build in a locally built Docker image (made like devkit/real_engine's, whose steps it reuses)."""

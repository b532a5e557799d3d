"""The stub engine: a test double of a vLLM image's control surface (command line, boot log, OpenAI
endpoints on a Unix socket, failure modes). No model is loaded and no GPU is used; every answer is
derived from the request bytes so tests can check exactly what reached the engine.

The modules import each other relatively and never import the fake `vllm`/`torch` packages, so the
host's tests can import them too (to know the exact lines the stub prints).
"""

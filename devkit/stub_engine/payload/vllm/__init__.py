"""Test double of the `vllm` package: only what the kit's runtime probe reads (no engine inside).

The version comes from STUB_VLLM_VERSION (default 0.11.0), so one image can play several vLLM versions.
"""
import os as _os

__version__ = _os.environ.get("STUB_VLLM_VERSION") or "0.11.0"

"""The stub's `vllm` package: only what the runtime probe imports (its version and its platform).

The version comes from STUB_VLLM_VERSION (default: the newest release, vllm_stub/knobs.py), so one image can play
several vLLM versions.
"""
import os as _os

# vllm_stub is a top-level package of the image, beside this one; mypy, run over the repository, cannot see it there.
from vllm_stub.knobs import DEFAULT_VERSION as _DEFAULT  # type: ignore[import-not-found]

__version__ = _os.environ.get("STUB_VLLM_VERSION") or _DEFAULT

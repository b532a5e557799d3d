"""Stub engine image for the kit's own tests: a vLLM look-alike for the control surface only.

`build.ensure_stub_image(client)` returns the ID of `onegpu-stub-engine:<hash>`, building it locally from
this machine's Python when missing (no registry, no pull). Its behaviour is chosen with STUB_*
environment variables of the container (see payload/vllm_stub/knobs.py).
"""


def __getattr__(name):
    # Lazy, so `python -m devkit.stub_engine.build` does not import build.py twice.
    if name in ("ensure_stub_image", "stub_tag", "REPOSITORY"):
        from . import build

        return getattr(build, name)
    raise AttributeError(name)

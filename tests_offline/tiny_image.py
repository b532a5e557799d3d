"""A one-file root filesystem for `docker import`: a local image for tests that need one, made without any
registry."""
from __future__ import annotations

import io
import tarfile


def tiny_rootfs(text: bytes = b"onegpu test image\n") -> bytes:
    """A tar holding one file with `text`; a different text gives a different image ID."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("onegpu-test.txt")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return buf.getvalue()

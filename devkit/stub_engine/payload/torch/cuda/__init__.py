"""Test double of `torch.cuda`: the device count comes from STUB_CUDA_DEVICES (default 1)."""
import os as _os


def device_count() -> int:
    """Number of CUDA devices the stub pretends to see."""
    return int(_os.environ.get("STUB_CUDA_DEVICES") or 1)


def is_available() -> bool:
    return device_count() > 0


def get_device_name(index: int = 0) -> str:
    if not 0 <= index < device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {index})")
    return "NVIDIA Stub GPU"

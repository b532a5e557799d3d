"""Test double of the `torch` package: version strings and a CUDA device count, nothing else.

`torch.cuda.device_count()` answers STUB_CUDA_DEVICES (default 1); no GPU is touched.
"""
from . import cuda, version

__version__ = version.__version__
__all__ = ["cuda", "version", "__version__"]

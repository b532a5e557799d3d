"""Version strings of the stub `torch` package."""
__version__ = "2.8.0+cu128"
cuda = "12.8"
git_version = "stub"

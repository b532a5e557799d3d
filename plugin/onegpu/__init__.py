"""The onegpu kit: can a very large MoE checkpoint load on one NVIDIA GPU plus host RAM through a local vLLM image?

The pytest plugin is onegpu.plugin (registered by the pytest11 entry point); importing this package imports
nothing else, so every subpackage can be used on its own.
"""

__version__ = "0.1.0"

"""Performance scripts; run each as `python benchmarks/<script>.py` (figures in RESULTS.md)."""

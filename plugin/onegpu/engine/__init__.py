"""The engine container: image, probe, launch, boot, watch, samples, the GPU lock, leftovers and the reaper."""

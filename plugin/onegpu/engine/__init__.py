"""The engine container: image, probe, launch, boot, watch, samples, the GPU lock, leftovers, the reaper, and
SIGTERM handled as Ctrl-C so that the container always comes down."""

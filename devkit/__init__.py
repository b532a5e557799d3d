"""What the kit's tests and benchmarks share, and what a contributor uses by hand: the engine doubles (the stub
image and the real vLLM CPU image), synthetic checkpoints, request files, the page-cache tools, and the harness that
builds a throwaway kit project around either engine (`python -m devkit.e2e.harness --help`). Not part of the
installed kit."""

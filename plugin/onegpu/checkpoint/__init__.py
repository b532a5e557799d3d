"""The checkpoint: config.json, the index and the safetensors headers read into facts (no weights read)."""

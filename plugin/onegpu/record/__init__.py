"""The receipt as one typed record: each section a frozen msgspec Struct, read from a run folder by one reader."""

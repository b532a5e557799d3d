"""Phase 4, custody: what was hashed, against which revision and which publisher's values."""

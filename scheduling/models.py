"""Models of the scheduling app (filled in by its owner)."""

"""Models of the frontend app (filled in by its owner)."""

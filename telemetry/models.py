"""Models of the telemetry app (filled in by its owner)."""

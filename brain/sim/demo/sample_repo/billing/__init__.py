"""Plain-text billing report lines."""

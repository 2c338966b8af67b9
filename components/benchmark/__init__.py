"""The benchmark step."""

"""The track step."""

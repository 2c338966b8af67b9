"""The package step."""

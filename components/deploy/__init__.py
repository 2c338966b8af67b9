"""The deploy step."""

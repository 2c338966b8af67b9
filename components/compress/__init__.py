"""The compress step."""

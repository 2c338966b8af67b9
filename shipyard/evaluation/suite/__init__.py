"""shipyard's offline lm-eval task suite (task YAMLs, JSON-lines data, helpers in utils.py)."""

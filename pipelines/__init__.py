"""shipyard pipelines (KFP v2)."""

"""The resolve step: fetch a model by URI into a pipeline artifact."""

"""KServe LLMInferenceService: deploy config and presets, render, validate against vendored CRDs, apply."""

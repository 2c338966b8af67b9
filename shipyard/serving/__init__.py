"""Layer 5: serving: the GPU memory planner, the local vLLM server, KServe rendering, validation and apply."""

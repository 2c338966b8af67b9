"""Layer 5: guidellm: benchmark configs, the guidellm runner and its report."""

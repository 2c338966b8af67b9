"""Layer 1: step environments: runtimes and `call_step`, image tags and builds, local venvs, locks."""

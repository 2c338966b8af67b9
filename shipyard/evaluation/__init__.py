"""Layer 5: lm-eval: eval configs, the offline suite, the evaluation cache and the lm-eval runner."""

"""Layer 4: MLflow: the tracker, the model registry, step runs, pending payloads and their replay."""

"""Layer 10 (above components and pipelines): running pipelines: kfp.local, the container rehearsal, the KFP client, the console."""

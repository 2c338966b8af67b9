"""shipyard: Kubeflow Pipelines that take an LLM from "it runs" to "it runs in production"."""

__version__ = "0.1.0"

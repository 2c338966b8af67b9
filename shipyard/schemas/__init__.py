"""Upstream definitions shipyard validates against, vendored byte-for-byte (see ``SOURCES.md``).

KServe's LLMInferenceService/LLMInferenceServiceConfig CRDs and presets, the Gateway API
Inference Extension's InferencePool and InferenceObjective, LeaderWorkerSet, Gateway API's
Gateway and HTTPRoute, prometheus-operator's PrometheusRule and PodMonitor, and the KFP pipeline spec and recurring-run API. They ship inside the
wheel and every runtime image, so validation never depends on anything outside the package.
"""



from shipyard.core.files import package_dir

SCHEMAS_DIR = package_dir("shipyard.schemas")

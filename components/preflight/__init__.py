"""The pre-flight step: every parameter checked before anything starts."""

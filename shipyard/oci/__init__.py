"""Layer 2: OCI: image layouts and modelcars, registry client and auth, push and pull."""

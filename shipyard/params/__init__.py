"""Layer 7: pipeline parameters: their declarations (KFP signature, README table), coercion and every value check."""

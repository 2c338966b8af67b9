"""Layer 3: model URIs (hf://, s3://, oci://, pvc://, local), their resolution, the embedded model, S3."""

"""The watch step: production against the envelope its model was qualified on."""

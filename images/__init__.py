"""The runtime images' build inputs (``<runtime>/Containerfile`` and ``requirements.lock``),
shipped in the wheel as ``shipyard.runtime_images`` so that :func:`shipyard.runtimes.runtime.runtime_image`
computes the same tag from an installed package as from the checkout."""

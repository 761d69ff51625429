"""The scheduled reconciler."""

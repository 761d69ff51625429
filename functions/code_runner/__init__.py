"""The code-runner Lambda: one `code` step run per invocation (docs/sandbox.md)."""

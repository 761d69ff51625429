"""Your Python tools for runs on Lambda.

`make build` (sam build) ships this package beside the functions, so the
Lambda functions can import it; the runtime config names each tool as
`module:function`:

    version: "1.0"
    tools:
      word_count: tools.example:word_count

A tool is a function decorated with `agent_runtime.tool` (or a plain function,
which the config's name wraps): typed arguments become its JSON Schema, its
docstring the description the model sees. Add modules here; what they import
must be in the runtime layer (the engine's dependencies) or in this package.
Locally the same file works with `agent-runtime run --tools tools/example.py`.
"""

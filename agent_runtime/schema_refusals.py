"""What a JSON Schema check refuses: the errors `agent_runtime.schemas` raises.

Apart from the checker itself, so a module that only catches them (a tool's
argument check, a prompt step's output check) loads none of jsonschema,
`referencing` and RE2 until a schema is compiled: a process that never
compiles one (the HTTP API serving a config without Python tools) never
loads them.
"""

from __future__ import annotations

PathPart = str | int
SchemaPath = tuple[PathPart, ...]


class SchemaRefused(ValueError):
    """A schema the runtime will not apply, or a validation it will not finish.

    `reason` says why in a sentence; `at` is where in the schema (keys and
    indexes from its root, `("properties", "x", "$ref")`), empty for the
    whole schema or for a validation that stopped.
    """

    def __init__(self, reason: str, at: SchemaPath = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


class SchemaInvalid(SchemaRefused):
    """The schema breaks its dialect's metaschema."""

"""A run submitted over HTTP: its manifest, what a client may not ask of the server, its id.

A client sends the agent manifest itself. Nothing it sends may make the
server read a file: a run manifest (its `agent.ref` is a path) and a
sub-run's `manifestRef` (at any depth of inline sub-runs) are refused here
with the field that named them; the CLI's `--config` and `--tools` are not
request options. Everything else, a scripted model's script path included,
is checked by the engine against the host policy (`agent_runtime.policy`)
for every manifest of the run tree, exactly as for the CLI.

Idempotency: a run created with an `Idempotency-Key` carries the run key of
(tenant, key) (`agent_runtime.run_ids.run_key`), which the store keeps
unique, so a repeat finds the run its first request created
(`RunStore.find_run_key`); its id is time-ordered like any other. The
request body's fingerprint (sha256 of its canonical JSON) is kept in the
run's options (`request_sha256`): a repeat with another body is a conflict.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent_runtime.errors import ManifestError
from agent_runtime.manifest import AgentManifest, SubRunStep, iter_steps, parse_agent_manifest
from agent_runtime.manifest_input import describe, parse_document
from agent_runtime.serde import canonical_json

# How a manifest sent over HTTP is named in messages, as a file is by the CLI.
SOURCE = "manifest"


def agent_from_request(manifest: dict[str, Any] | str) -> AgentManifest:
    """The agent manifest of a request: an object, or YAML/JSON text (parsed as
    `agent-runtime validate` reads a file, so its errors read the same)."""
    data: Any = manifest
    if isinstance(manifest, str):
        data = parse_document(manifest, source=SOURCE)
        if not isinstance(data, dict):
            got = "an empty document" if data is None else describe(data)
            raise ManifestError(f"expected a mapping at the top level, got {got}",
                                source=SOURCE)
    if "agent" in data and "steps" not in data:
        raise ManifestError("this is a run manifest, which names its agent by a file path; "
                            "send the agent manifest itself (variables and budget go in the "
                            "request)", source=SOURCE, field="agent.ref")
    agent = parse_agent_manifest(data, source=SOURCE)
    for path, step in iter_steps(agent.steps, into_sub_runs=True):
        if isinstance(step, SubRunStep) and step.manifest_ref is not None:
            raise ManifestError("a manifest sent over HTTP must be self-contained: give the "
                                "sub-run's agent inline as `manifest`, not as a file path",
                                source=SOURCE, field=f"{path}.manifestRef")
    return agent


def request_fingerprint(body: Any) -> str:
    """sha256 of the body's canonical JSON (keys sorted, no whitespace)."""
    return hashlib.sha256(canonical_json(body).encode("utf-8", "surrogatepass")).hexdigest()

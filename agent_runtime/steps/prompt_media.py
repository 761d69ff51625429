"""Artifact references in a prompt's message history, made inline for the model.

A durable history names media by artifact (`{type: image, artifact: {...}}`)
rather than carrying its bytes. As the reference does, when the runtime has
an artifact store each request gets the bytes inline: an image or file part
gains `data` (base64), and a tool result's artifacts become `data:` URIs. The
transcript keeps the references, so checkpoints stay small. Without a store,
a reference must carry a `uri` the provider can fetch. With one, a run reads
only its own artifacts (`agent_runtime.artifact_access`): a uri of another
run's fails the step as `artifact_refused`.
"""

from __future__ import annotations

import base64

from stores.records import JsonObject

from agent_runtime.artifact_access import ArtifactReader, ArtifactRefused
from agent_runtime.errors import StepFailed

MEDIA_PARTS = ("image", "file")


def resolve_media(messages: list[JsonObject], reader: ArtifactReader | None, *,
                  step_path: str) -> list[JsonObject]:
    """`messages` with artifact references inlined from `reader` (new dicts; the
    transcript's own are left as they are)."""
    return [{**message, "content": [_part(part, reader, step_path)
                                    for part in message.get("content") or []]}
            for message in messages]


def _part(part: JsonObject, reader: ArtifactReader | None, step_path: str) -> JsonObject:
    kind = part.get("type")
    if kind == "tool-result" and reader is not None:
        artifacts = (part.get("result") or {}).get("artifacts")
        if artifacts:
            loaded = []
            for artifact in artifacts:
                data, media_type = _load(artifact, reader, step_path)
                loaded.append({**artifact, "mediaType": media_type, "size": len(data),
                                "uri": f"data:{media_type};base64,"
                                       f"{base64.b64encode(data).decode('ascii')}"})
            return {**part, "result": {**part["result"], "artifacts": loaded}}
        return part
    artifact = part.get("artifact")
    if kind not in MEDIA_PARTS or artifact is None or part.get("data") is not None:
        return part
    if reader is None:
        if artifact.get("uri") is None:
            raise StepFailed("artifact_unavailable",
                             f"step {step_path}: media artifact {artifact.get('id')!r} needs an "
                             "artifact store (--artifacts) or a uri")
        return part
    data, media_type = _load(artifact, reader, step_path)
    inlined: JsonObject = {**part, "data": base64.b64encode(data).decode("ascii"),
               "mediaType": part.get("mediaType") or media_type}
    if kind == "file":
        inlined["name"] = part.get("name") or artifact.get("name")
    return inlined


def _load(artifact: JsonObject, reader: ArtifactReader, step_path: str) -> tuple[bytes, str]:
    uri = artifact.get("uri")
    if not uri:
        # Named by id alone, as the reference allows: the id of an artifact this run
        # recorded (the SHA-256 of its bytes).
        named = artifact.get("id") or artifact.get("sha256")
        uri = reader.uri_of(named) if isinstance(named, str) else None
        if uri is None:
            raise StepFailed("artifact_unavailable",
                             f"step {step_path}: artifact {named!r} has no uri, and no "
                             "artifact this run recorded has that id (an artifact's id is "
                             "the SHA-256 of its bytes)")
    try:
        data = reader.read(uri)
    except ArtifactRefused as error:
        raise StepFailed("artifact_refused",
                         f"step {step_path}: artifact {artifact.get('id')!r} may not be read "
                         f"by this run: {error}") from None
    except (OSError, KeyError, ValueError) as error:
        raise StepFailed("artifact_unavailable",
                         f"step {step_path}: artifact {artifact.get('id')!r} could not be "
                         f"loaded: {error}") from error
    return data, str(artifact.get("mediaType") or "application/octet-stream")

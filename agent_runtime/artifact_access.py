"""Which artifacts a run may read: its own, and those of the runs it was forked from.

An artifact reference in a prompt's history is a uri (`file:///.../runs/<run>/<sha256>`,
`s3://bucket/artifacts/<run>/<sha256>`), and a manifest may write any uri it
likes into `messages`. Handing whatever it names to the model would let one
run (one tenant) read another's artifacts by naming them. So a run reads:

* artifacts stored under its own run id (what its tools saved);
* those of the run it was forked from, and that run's source, and so on:
  a fork starts from a copy of its source's checkpoint, whose history names
  the source's artifacts. Only sources of the same tenant count;
* an artifact stored before artifacts were kept per run (shared by every run,
  so owned by none) only when the run has no tenant: a local user's own runs.

Sub-runs do not share: a child run's history is its own, and it reads only
its own artifacts (and its fork sources'), like any run. Anything else is
refused with `ArtifactRefused`, which names the run the uri belongs to and
never reads the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from stores.base import ArtifactStore, RunStore
from stores.records import ArtifactRef, RunRecord

from agent_runtime.errors import AgentRuntimeError
from agent_runtime.run_options import FORKED_FROM

__all__ = ["ArtifactReader", "ArtifactRefused"]

# A fork of a fork of ...: deeper than any real lineage, short enough to walk.
MAX_FORK_DEPTH = 1000


class ArtifactRefused(AgentRuntimeError):
    """The run may not read this artifact: it belongs to another run."""


class ArtifactReader:
    """The artifacts `run` may read from `store` (`runs` tells its fork sources)."""

    def __init__(self, store: ArtifactStore, runs: RunStore, run: RunRecord,
                 recorded: Sequence[ArtifactRef] = ()) -> None:
        self._store = store
        self._runs = runs
        self._run = run
        self._recorded = recorded
        self._lineage: set[str] | None = None

    def uri_of(self, artifact_id: str) -> str | None:
        """The uri of the artifact the run recorded under `artifact_id`, or None. An
        artifact's id is the SHA-256 of its bytes (hex, `sha256:` optional), the
        name the runtime gave it when a tool saved it (or a fork's source did)."""
        digest = artifact_id.removeprefix("sha256:").lower()
        return next((ref.uri for ref in self._recorded if ref.sha256 == digest), None)

    def read(self, uri: str) -> bytes:
        """The artifact's bytes; `ArtifactRefused` for another run's, ValueError for a
        uri of no artifact of the store, `CorruptRecord` for damaged bytes."""
        owner = self._store.run_of(uri)
        if owner is None:
            if self._run.tenant is not None:
                raise ArtifactRefused(
                    "it was stored before artifacts were kept per run, so it belongs to no "
                    "run; a tenant's run reads only its own run's artifacts")
        elif owner not in self.lineage():
            raise ArtifactRefused(
                f"it belongs to run {owner!r}; run {self._run.run_id!r} reads only its own "
                "artifacts and those of the runs it was forked from")
        return self._store.get(uri)

    def lineage(self) -> set[str]:
        """This run and the runs it was forked from (that still exist), same tenant."""
        if self._lineage is None:
            runs = {self._run.run_id}
            record: RunRecord | None = self._run
            while record is not None and len(runs) <= MAX_FORK_DEPTH:
                origin = record.options.get(FORKED_FROM)
                source = origin.get("run_id") if isinstance(origin, dict) else None
                if not isinstance(source, str) or source in runs:
                    break
                record = self._runs.load_run(source)
                if record is None or record.tenant != self._run.tenant:
                    break
                runs.add(source)
            self._lineage = runs
        return self._lineage

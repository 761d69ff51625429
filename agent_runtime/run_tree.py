"""Every manifest a run will execute: its own, and its sub-runs' at any depth.

A sub-run step names its child inline (`manifest`) or by file
(`manifestRef`, relative to the directory of the manifest that names it).
The host policy and the host's own checks are applied to each of them
before a run is created, so a child deep in the tree cannot pick what its
root could not. `iter_run_tree` yields them depth first, each with the
field path of the step that starts it, so a refusal names where it is.

A `manifestRef` is read as `agent-runtime validate` reads a file (bounded
by the host's input limits); one that cannot be read or parsed is left for
its step, which fails naming it if it runs, and whose child is checked where
it starts. A file already on the path from the root is
not read again (a cycle runs only as deep as its own `when`s allow, and
each run of it is checked where that child starts); past `MAX_TREE_DEPTH`
levels the tree is refused, since every child's run id is longer than its
parent's and no store could hold it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent_runtime.errors import InvalidInput, ManifestError
from agent_runtime.manifest import AgentManifest, SubRunStep, iter_steps
from agent_runtime.run_manifest import load_agent_manifest

__all__ = ["MAX_TREE_DEPTH", "TreeManifest", "iter_run_tree"]

MAX_TREE_DEPTH = 32


@dataclass(frozen=True)
class TreeManifest:
    """One manifest of a run tree: where it is named (`prefix`, the field path of an
    inline child such as `steps[1].manifest`; empty for the root and for a file's
    manifest), the file or request it came from (`source`), its directory for its
    own `manifestRef`s, and how many sub-runs down it is."""

    manifest: AgentManifest
    prefix: str
    source: str
    directory: Path | None
    depth: int

    def field(self, path: str) -> str:
        """A field of this manifest, named from the root (`steps[1].manifest.steps[0].model`)."""
        return f"{self.prefix}.{path}" if self.prefix else path


def iter_run_tree(root: AgentManifest, *, source: str, directory: Path | None,
                  base_dir: Path) -> Iterator[TreeManifest]:
    """The root, then each sub-run's manifest, depth first. A `manifestRef` of a
    manifest with no directory (one sent as a request) is resolved in `base_dir`,
    as the sub-run step resolves it."""
    stack = [(TreeManifest(root, "", source, directory, 0), frozenset[Path]())]
    while stack:
        node, files = stack.pop()
        yield node
        children: list[tuple[TreeManifest, frozenset[Path]]] = []
        for path, step in iter_steps(node.manifest.steps):
            if not isinstance(step, SubRunStep):
                continue
            if node.depth + 1 > MAX_TREE_DEPTH:
                raise ManifestError(f"sub-runs nest deeper than {MAX_TREE_DEPTH} levels",
                                    source=node.source, field=node.field(path))
            if step.manifest is not None:
                child = TreeManifest(step.manifest, node.field(f"{path}.manifest"),
                                     node.source, node.directory, node.depth + 1)
                children.append((child, files))
                continue
            file = ((node.directory or base_dir) / str(step.manifest_ref)).resolve()
            if file in files:
                continue
            try:
                manifest = load_agent_manifest(file)
            except InvalidInput:
                # Missing or malformed: the step fails naming it when it runs (it
                # may never run), and the child it would start is checked there.
                continue
            # Its refusals name its own file and its own fields.
            child = TreeManifest(manifest, "", str(file), file.parent, node.depth + 1)
            children.append((child, files | {file}))
        stack.extend(reversed(children))

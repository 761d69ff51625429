"""Which runtime config file a command reads when `--config` does not name one.

As the reference implementation finds it: a file named
`agent-runtime.config.yaml`, `.yml` or `.json` (in that order: the first
that exists wins, and the others at that level are passed over, which
`validate` reports) beside the manifest the command runs or checks, else in
the current directory. Commands that name no manifest (`list`, `resume`,
`serve`...) look in the current directory only; a run remembers the file it
used, so `resume` reads the same one wherever it is started.

Light on purpose (pathlib only): the parser's module imports nothing heavier.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG_NAMES = ("agent-runtime.config.yaml", "agent-runtime.config.yml",
                "agent-runtime.config.json")

GIVEN = "--config"
BESIDE_MANIFEST = "beside the manifest"
CURRENT_DIRECTORY = "in the current directory"


@dataclass(frozen=True)
class ConfigChoice:
    """The runtime config file a command reads, and how it was chosen."""

    path: Path  # absolute, links resolved
    found: str  # GIVEN, BESIDE_MANIFEST or CURRENT_DIRECTORY
    passed_over: tuple[Path, ...] = ()  # other names at the same level, not read

    @property
    def given(self) -> bool:
        return self.found == GIVEN

    def describe(self) -> str:
        """`PATH (found beside the manifest)`, naming any file passed over."""
        text = f"{self.path} ({'given with --config' if self.given else 'found ' + self.found}"
        if self.passed_over:
            text += "; not read: " + ", ".join(path.name for path in self.passed_over)
        return text + ")"

    def to_json(self) -> dict[str, object]:
        return {"file": str(self.path), "found": self.found,
                "passed_over": [str(path) for path in self.passed_over]}


def _at(directory: Path, found: str) -> ConfigChoice | None:
    present = [directory / name for name in CONFIG_NAMES if (directory / name).exists()]
    if not present:
        return None
    return ConfigChoice(present[0], found, tuple(present[1:]))


def find_config(manifest: str | Path | None = None) -> ConfigChoice | None:
    """The config file beside `manifest` (when given), else in the current directory."""
    here = Path.cwd().resolve()
    if manifest is not None:
        # The directory as the user named it (a link to the manifest is not followed).
        beside = Path(manifest).absolute().parent.resolve()
        if beside != here:
            choice = _at(beside, BESIDE_MANIFEST)
            if choice is not None:
                return choice
    return _at(here, CURRENT_DIRECTORY)


def choose_config(given: str | None, manifest: str | Path | None = None) -> ConfigChoice | None:
    """`--config FILE` when given (it always wins), else `find_config(manifest)`."""
    if given:
        return ConfigChoice(Path(given).resolve(), GIVEN)
    return find_config(manifest)

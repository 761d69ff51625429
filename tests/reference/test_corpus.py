"""The reference implementation's own example manifests, runtime configs and
documentation snippets (tests/reference/corpus/, provenance in its README.md).

Each file the reference's validator accepts (its verdict is recorded in
corpus/verdicts.json, so neither node nor the network is needed here) is
accepted by this runtime's validation, or refused with the words
corpus/differences.yaml records for it; docs/reference-parity.md explains each
difference. A refusal not recorded fails, and so does a record for a file now
accepted, so the list stays true. A file the reference refuses is refused here
too, naming the field the reference names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_runtime.cli import main
from agent_runtime.errors import ManifestError
from agent_runtime.manifest_input import read_document
from agent_runtime.run_manifest import parse_run_manifest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "reference" / "corpus"
PARITY_DOC = REPO / "docs" / "reference-parity.md"
# What the corpus directory holds besides the corpus itself.
CORPUS_TOOLING = {"README.md", "collect.py", "reference_verdicts.mjs", "index.json",
                  "verdicts.json", "differences.yaml"}

INDEX: dict[str, Any] = json.loads((CORPUS / "index.json").read_text(encoding="utf-8"))
VERDICTS: dict[str, Any] = json.loads(
    (CORPUS / "verdicts.json").read_text(encoding="utf-8"))["verdicts"]
DIFFERENCES: dict[str, dict[str, str]] = yaml.safe_load(
    (CORPUS / "differences.yaml").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Case:
    """One check: a corpus file as upstream wrote it, or a documentation excerpt
    completed with the line it leaves out (`completion`)."""

    key: str
    file: str
    kind: str
    completion: str | None
    reference: dict[str, Any]


def _cases() -> list[Case]:
    cases = []
    for entry in INDEX["files"]:
        verdict = VERDICTS[entry["file"]]
        cases.append(Case(entry["file"], entry["file"], entry["kind"], None, verdict))
        if "completion" in entry:
            cases.append(Case(f"{entry['file']} (completed)", entry["file"], entry["kind"],
                              entry["completion"], verdict["completed"]))
    return cases


CASES = _cases()
ACCEPTED = [case for case in CASES if case.reference["verdict"] == "accepted"]
REFUSED = [case for case in CASES if case.reference["verdict"] == "refused"]


def _names_a_missing_agent(path: Path) -> bool:
    ref = read_document(path).get("agent")
    return isinstance(ref, dict) and not (path.parent / str(ref.get("ref"))).is_file()


def our_refusal(case: Case, scratch: Path, capsys: pytest.CaptureFixture[str]) -> str | None:
    """What this runtime's validation says: None when it accepts, else its message.

    The CLI's `validate` and `config validate`, as a user runs them. A run manifest
    whose agent upstream never shipped is checked on its own fields, as the
    reference's verdict was (corpus/README.md)."""
    path = CORPUS / case.file
    if case.completion is not None:
        path = scratch / path.name
        path.write_bytes(case.completion.encode() + (CORPUS / case.file).read_bytes())
    if case.kind == "run" and _names_a_missing_agent(path):
        try:
            parse_run_manifest(read_document(path), source=str(path))
        except ManifestError as error:
            return str(error)
        return None
    argv = ["config", "validate", str(path)] if case.kind == "config" else ["validate", str(path)]
    code = main(argv)
    captured = capsys.readouterr()
    return None if code == 0 else captured.err


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no runtime config in it for validate to discover."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", ACCEPTED, ids=[case.key for case in ACCEPTED])
def test_what_the_reference_accepts_is_accepted_or_refused_for_the_recorded_reason(
        case: Case, scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refusal = our_refusal(case, scratch, capsys)
    recorded = DIFFERENCES.get(case.key)
    if refusal is None:
        assert recorded is None, (f"{case.key} is accepted now: remove it from "
                                  "corpus/differences.yaml and docs/reference-parity.md")
        return
    assert recorded is not None, (f"{case.key} is refused without a recorded reason "
                                  f"(corpus/differences.yaml): {refusal}")
    assert recorded["refusal"] in refusal


def _reference_fields(message: str) -> list[str]:
    """The fields a refusal of the reference names (its zod issues' paths), in this
    runtime's spelling: `steps[0].model`."""
    return [re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", ".".join(str(part) for part in issue["path"]))
            for issue in json.loads(message)]


@pytest.mark.parametrize("case", REFUSED, ids=[case.key for case in REFUSED])
def test_what_the_reference_refuses_is_refused_here_by_the_same_field(
        case: Case, scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refusal = our_refusal(case, scratch, capsys)
    assert refusal is not None, f"{case.key}: the reference refuses it; this runtime accepts it"
    assert any(f"{field}:" in refusal for field in _reference_fields(case.reference["message"]))


def test_the_corpus_is_what_its_index_lists() -> None:
    on_disk = {path.relative_to(CORPUS).as_posix() for path in CORPUS.rglob("*")
               if path.is_file() and "__pycache__" not in path.parts}
    listed = {entry["file"] for entry in INDEX["files"]}
    assert on_disk - CORPUS_TOOLING == listed
    assert set(VERDICTS) == listed


def test_every_recorded_difference_is_a_check_the_reference_accepts() -> None:
    assert set(DIFFERENCES) <= {case.key for case in ACCEPTED}
    for key, recorded in DIFFERENCES.items():
        assert recorded["refusal"].strip() and recorded["why"].strip(), key


def test_the_parity_doc_lists_each_difference_and_the_counts() -> None:
    doc = PARITY_DOC.read_text(encoding="utf-8")
    counts = doc.casefold()
    for key, recorded in DIFFERENCES.items():
        assert f"`{key}`" in doc and recorded["refusal"] in doc, key
    both = len(ACCEPTED) - len(DIFFERENCES)
    assert f"accepted by both: {both} of the {len(ACCEPTED)} checks" in counts
    assert f"{len(INDEX['files'])} files" in counts

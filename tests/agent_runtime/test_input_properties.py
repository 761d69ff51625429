"""Generated hostile input: manifests, variables, run ids and conditions.

Every case ends in success or a pinned exit code with one short, printable error
line — never another exception — and within a bounded amount of memory
(tracemalloc peak). The command runs in-process (`main()`), so thousands of cases
stay fast; `tests/e2e/test_hostile_cli.py` runs a few in a child process.

Reproducible: derandomized, no example database. The `max_examples` below add up
to `CASES` (at least 5,000).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tracemalloc
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_runtime.cli import main
from agent_runtime.conditions import compile_condition
from agent_runtime.errors import ConditionEvaluationError, ConditionSyntaxError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
MEMORY_LIMIT = 64 * 1024 * 1024
MEMORY_RUN = ["--model", "scripted/echo", "--store-driver", "memory", "--events", "none",
              "--artifacts", "none"]


def examples(count: int) -> Any:
    return settings(max_examples=count, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# (test, max_examples): the total is checked below, so trimming one is seen.
BUDGET = {"yaml_text": 900, "raw_bytes": 300, "json_documents": 700, "tree_mutations": 800,
          "text_mutations": 600, "variables": 500, "run_ids": 500, "conditions": 1000,
          "conditions_in_manifests": 300}
CASES = sum(BUDGET.values())


def test_the_generated_cases_add_up_to_at_least_5000() -> None:
    assert CASES >= 5000


@contextlib.contextmanager
def bounded_memory() -> Iterator[None]:
    """Memory allocated at peak by the block, traced for the block alone (not while
    hypothesis generates the next case)."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT, f"{peak:,} bytes at peak"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("hostile")
    for path in FIXTURES.iterdir():
        shutil.copy(path, folder / path.name)
    with contextlib.chdir(folder):
        yield folder


def inert(line: str) -> bool:
    """Nothing in `line` that steers a terminal: controls, format characters, surrogates."""
    return not any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")
                   for char in line)


def cli(*argv: str, allowed: frozenset[int]) -> tuple[int, str]:
    """`main(argv)` in-process: a pinned exit code, one error line, bounded memory."""
    out, err = io.StringIO(), io.StringIO()
    with bounded_memory(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code in allowed, (code, err.getvalue()[:500])
    if code != 0:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1, err.getvalue()[:2000]
        assert lines[0].startswith("error: ") and inert(lines[0]) and len(lines[0]) <= 410
    return code, err.getvalue()


VALIDATED = frozenset({0, 2})


def validate(workdir: Path, content: str | bytes, suffix: str = ".agent.yaml") -> int:
    path = workdir / f"case{suffix}"
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    path.write_bytes(content)
    return cli("validate", path.name, allowed=VALIDATED)[0]


# -- strategies ---------------------------------------------------------------------------

hostile_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | \
    st.sampled_from(["", "\ud800", "\x1b]0;x\x07", "..", "../x", "a/b", ".", "__proto__",
                     "{{ a }}", "a.b", " x ", "\u202e", "é" * 300, "x" * 5000])
scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from([10**100, -10**101, 2**64])
           | st.floats() | hostile_text)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(hostile_text, inner,
                                                                         max_size=5),
    max_leaves=25)
deep_values = st.integers(min_value=1, max_value=100).map(
    lambda depth: json.loads("[" * depth + "]" * depth))

YAML_ALPHABET = st.sampled_from([*"ab01:-?,[]{}&*!|>'\"%@`#~.<= \n\t\\",
                                 "\ud800", "é", "\x00", "\x85", "\ufeff", "  ", "\n- ",
                                 "!!", "&a ", "*a", "<<: ", "? ", "{{", "2024-13-45", "0x",
                                 "9" * 120, "schemaVersion: '1.0'\n", "steps: []\n"])
yaml_texts = st.lists(YAML_ALPHABET, max_size=60).map("".join)


def fixture_data() -> list[tuple[str, Any]]:
    return [(path.name, yaml.safe_load(path.read_text()))
            for path in sorted(FIXTURES.glob("*.agent.yaml"))]


FIXTURE_DATA = fixture_data()
FIXTURE_TEXTS = [path.read_text() for path in sorted(FIXTURES.glob("*.yaml"))]


def paths_in(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths_in(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths_in(value, (*prefix, index))


@st.composite
def mutated_fixtures(draw: st.DrawFn) -> Any:
    _, original = draw(st.sampled_from(FIXTURE_DATA))
    data = json.loads(json.dumps(original))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(list(paths_in(data))))
        if not path:
            continue
        parent: Any = data
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add", "deepen"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values | deep_values)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(hostile_text)] = draw(json_values)
        elif action == "add":
            parent.append(draw(json_values))
        else:
            parent[path[-1]] = [parent[path[-1]]] * draw(st.integers(1, 3))
    return data


@st.composite
def text_mutations(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(FIXTURE_TEXTS))
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        cut = draw(st.integers(min_value=0, max_value=5))
        text = text[:at] + draw(YAML_ALPHABET | hostile_text) + text[at + cut:]
    return text


def dump_yaml(data: Any) -> str:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    try:
        return yaml.dump(data, Dumper=dumper, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):  # a lone surrogate libyaml cannot write
        return json.dumps(data)


# -- manifests ----------------------------------------------------------------------------


@examples(BUDGET["yaml_text"])
@given(text=yaml_texts)
def test_any_yaml_text_validates_or_is_refused(workdir: Path, text: str) -> None:
    validate(workdir, text)


@examples(BUDGET["raw_bytes"])
@given(content=st.binary(max_size=200) | st.sampled_from(
    [b"\xff\xfe", b"\xef\xbb\xbfa: 1", b"a: \xc3", b"\x00" * 10]))
def test_any_bytes_validate_or_are_refused(workdir: Path, content: bytes) -> None:
    validate(workdir, content)
    validate(workdir, content, suffix=".agent.json")


@examples(BUDGET["json_documents"])
@given(document=st.dictionaries(
    st.sampled_from(["schemaVersion", "id", "name", "steps", "variables", "model", "limits",
                     "metadata", "connections", "agent", "runId", "budget", "execution"])
    | hostile_text, json_values | deep_values, max_size=6),
    as_json=st.booleans())
def test_any_json_document_validates_or_is_refused(workdir: Path, document: dict[str, Any],
                                                   as_json: bool) -> None:
    text = json.dumps(document) if as_json else dump_yaml(document)
    validate(workdir, text, suffix=".agent.json" if as_json else ".agent.yaml")


@examples(BUDGET["tree_mutations"])
@given(data=mutated_fixtures(), as_json=st.booleans())
def test_mutated_fixtures_validate_or_are_refused(workdir: Path, data: Any,
                                                  as_json: bool) -> None:
    text = json.dumps(data) if as_json else dump_yaml(data)
    validate(workdir, text, suffix=".agent.json" if as_json else ".agent.yaml")


@examples(BUDGET["text_mutations"])
@given(text=text_mutations())
def test_mutated_fixture_text_validates_or_is_refused(workdir: Path, text: str) -> None:
    validate(workdir, text)


# -- variables and run ids ----------------------------------------------------------------

variables_json = (
    st.dictionaries(st.sampled_from(["audience", "release", "style", "AUDIENCE"]) | hostile_text,
                    json_values | deep_values, max_size=4).map(json.dumps)
    | st.lists(st.sampled_from([*'{}[]":,01 aeu\\', "\\ud800", '"audience"']),
               max_size=40).map("".join)
    | st.builds(lambda a, b: f'{{"audience": {json.dumps(a)}, "audience": {json.dumps(b)}}}',
                hostile_text, hostile_text))


@examples(BUDGET["variables"])
@given(variables=variables_json)
def test_any_variables_run_or_are_refused(workdir: Path, variables: str) -> None:
    cli("run", "release-brief.agent.yaml", *MEMORY_RUN, "--variables", variables,
        allowed=frozenset({0, 2}))


run_ids = hostile_text | st.text(st.sampled_from([*"ab./\\-_:é ", "\x00", "\n"]),
                                 max_size=250)


@examples(BUDGET["run_ids"])
@given(run_id=run_ids, on_file_store=st.booleans())
def test_any_run_id_runs_or_is_refused(workdir: Path, run_id: str, on_file_store: bool) -> None:
    if "\x00" in run_id:
        run_id = run_id.replace("\x00", "")  # argv cannot carry NUL
    store = ["--store-driver", "file", "--store", "files", "--events", "none",
             "--artifacts", "none", "--model", "scripted/echo"] if on_file_store else MEMORY_RUN
    code, _ = cli("run", "hello.agent.yaml", *store, "--run-id", run_id,
                  allowed=frozenset({0, 2, 4}))
    if on_file_store and code == 0:
        cli("inspect", run_id, "--store-driver", "file", "--store", "files",
            allowed=frozenset({0}))
    cli("inspect", run_id, "--store-driver", "memory", allowed=frozenset({2, 3}))


# -- conditions ---------------------------------------------------------------------------

atoms = st.sampled_from(["a", "b", "s", "n", "big", "l", "o", "missing", "a.b", "l[0]", "o.k",
                         "l.length", "{{ o.k }}", "true", "null", "1", "0.5", "'x'", '"y"',
                         "9" * 30, "[1, 2]", "{k: 1}", "-1", "!a"])
expressions = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "//", "%", "==", "!=", "<",
                                          ">=", "&&", "||", "in"]), inner)
        .map(lambda p: f"{p[0]} {p[1]} {p[2]}"),
        inner.map(lambda e: f"({e})"), inner.map(lambda e: f"!{e}"),
        st.tuples(inner, inner, inner).map(lambda p: f"{p[0]} ? {p[1]} : {p[2]}"),
        st.tuples(inner, inner).map(lambda p: f"[{p[0]}, {p[1]}]"),
        st.tuples(inner, st.integers(1, 60)).map(lambda p: " * ".join([p[0]] * p[1]))),
    max_leaves=40)
condition_text = expressions | st.lists(
    st.sampled_from([*"ab01 .()[]{}!|&=<>+-*/%?:,'\"\\", "in", "{{", "}}", "\ud800"]),
    max_size=60).map("".join)
SCOPE = {"a": {"b": [1, "x"]}, "b": 0, "s": "1" * 50_000 + "x", "n": 2**53, "big": 10**99,
         "l": [[0]] * 1000 + [1], "o": {"k": "v" * 10_000}}


@examples(BUDGET["conditions"])
@given(expression=condition_text)
def test_any_condition_compiles_and_evaluates_or_fails_cleanly(expression: str) -> None:
    with bounded_memory():
        try:
            condition = compile_condition(expression)
        except ConditionSyntaxError as error:
            assert 0 <= error.position <= len(expression)
            assert "\n" not in str(error) and len(str(error)) < 300
            return
        try:
            condition.evaluate(SCOPE)
        except ConditionEvaluationError as error:
            assert "\n" not in str(error) and len(str(error)) < 300


@examples(BUDGET["conditions_in_manifests"])
@given(expression=condition_text, field=st.sampled_from(["when", "loop"]))
def test_conditions_in_manifests_validate_or_are_refused(workdir: Path, expression: str,
                                                         field: str) -> None:
    step: dict[str, Any] = {"id": "a", "type": "prompt", "prompt": "hi"}
    if field == "when":
        step["when"] = expression
    else:
        step = {"id": "l", "type": "loop", "loop": {"maxIterations": 2, "goal": expression},
                "steps": [step]}
    text = json.dumps({"schemaVersion": "1.0", "steps": [step]})
    if validate(workdir, text, suffix=".agent.json") == 0:
        cli("run", "case.agent.json", *MEMORY_RUN, allowed=frozenset({0, 1}))

"""Input limits: their defaults, the config's `limits:` section, bounded reads, both YAML
loaders refusing the same input, and conditions whose cost is bounded."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from engine_harness import Harness, manifest

from agent_runtime import RunStatus
from agent_runtime import manifest_input as mi
from agent_runtime.conditions import compile_condition
from agent_runtime.config import load_config, parse_config
from agent_runtime.errors import (
    ConditionEvaluationError,
    ConditionSyntaxError,
    ConfigError,
    ManifestError,
    ManifestNotFound,
    NotFound,
    VariableError,
)
from agent_runtime.limits import (
    DEFAULT_LIMITS,
    MIB,
    InputLimits,
    current_limits,
    read_bounded,
    use_limits,
)
from agent_runtime.manifest import parse_agent_manifest
from agent_runtime.run_manifest import load_manifest_file
from agent_runtime.testing import scripted
from agent_runtime.variables import parse_variables_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


# -- defaults and the config's `limits:` ------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    assert current_limits() == DEFAULT_LIMITS
    assert DEFAULT_LIMITS.model_dump(by_alias=True) == {
        "manifestBytes": 2 * MIB, "variablesBytes": MIB, "maxDepth": 64, "maxValues": 100_000,
        "maxStringLength": MIB, "maxIntegerDigits": 100, "conditionLength": 16_384,
        "conditionCost": 1_000_000}
    documented = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text()
    for key in DEFAULT_LIMITS.model_dump(by_alias=True):
        assert f"`{key}`" in documented


def test_the_runtime_config_overrides_limits(tmp_path: Path) -> None:
    path = tmp_path / "runtime.yaml"
    path.write_text("version: '1.0'\nlimits: {maxDepth: 10, conditionCost: 5000}\n")
    limits = load_config(path).limits
    assert (limits.max_depth, limits.condition_cost) == (10, 5000)
    assert limits.manifest_bytes == DEFAULT_LIMITS.manifest_bytes  # the rest keep defaults


@pytest.mark.parametrize(("section", "field", "reason"), [
    ({"maxDepht": 10}, "limits.maxDepht", "unknown field"),
    ({"maxDepth": 10_000}, "limits.maxDepth", "less than or equal to 500"),
    ({"manifestBytes": 0}, "limits.manifestBytes", "greater than or equal"),
    ({"conditionCost": "lots"}, "limits.conditionCost", "integer"),
    ("none", "limits", "valid"),
])
def test_a_bad_limits_section_is_refused_by_name(section: Any, field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"version": "1.0", "limits": section}, source="runtime.yaml")
    assert refused.value.field == field and reason in refused.value.reason


def test_the_config_file_is_read_within_a_bound(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="larger than the limit of 1 MiB"):
        load_config("/dev/zero")
    with pytest.raises(NotFound, match="file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"version: '1.0'\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(tmp_path / "latin1.yaml")
    (tmp_path / "twice.yaml").write_text("version: '1.0'\nversion: '1.0'\n")
    with pytest.raises(ConfigError, match="duplicate key 'version'"):
        load_config(tmp_path / "twice.yaml")


# -- bounded reads ----------------------------------------------------------------------


@pytest.fixture
def peak_memory() -> Iterator[list[int]]:
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def test_dev_zero_and_a_50_mb_file_are_refused_by_size_at_once(
        tmp_path: Path, peak_memory: list[int]) -> None:
    sparse = tmp_path / "huge.agent.yaml"
    with sparse.open("wb") as file:
        file.truncate(50 * 1024 * 1024)
    for path in (Path("/dev/zero"), sparse):
        with pytest.raises(ManifestError) as refused:
            load_manifest_file(path)
        assert str(refused.value) == f"{path}: the manifest is larger than the limit of 2 MiB"
    with pytest.raises(VariableError, match=r"^--variables: larger than the limit of 1 MiB$"):
        parse_variables_json("[" + " " * MIB + "]")
    peak = tracemalloc.get_traced_memory()[1]
    assert peak < 8 * MIB  # limit + 1 bytes read each time, never the whole file


def test_read_bounded_names_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "small").write_bytes(b"x" * 10)
    assert read_bounded(tmp_path / "small", 10, what="file") == b"x" * 10
    with pytest.raises(ManifestError, match="larger than the limit of 9 bytes"):
        read_bounded(tmp_path / "small", 9, what="file", error=ManifestError)
    with pytest.raises(ManifestNotFound, match="cannot read the manifest: file not found"):
        read_bounded(tmp_path / "nope", 9, what="manifest", error=ManifestError,
                     missing=ManifestNotFound)
    with pytest.raises(ManifestError, match="is a directory, expected a manifest"):
        read_bounded(tmp_path, 9, what="manifest", error=ManifestError)
    with pytest.raises(ManifestError, match="a part of the path is a file"):
        read_bounded(tmp_path / "small" / "x", 9, what="manifest", error=ManifestError)
    with pytest.raises(ManifestError, match="file name is too long"):
        read_bounded(tmp_path / ("a" * 5000), 9, what="manifest", error=ManifestError)


def test_limits_in_effect_bound_every_reader() -> None:
    deep: Any = "leaf"
    for _ in range(12):
        deep = [deep]
    data = {"schemaVersion": "1.0", "steps": [], "metadata": {"deep": deep}}
    parse_agent_manifest(data, source="a.yaml")
    with use_limits(InputLimits(maxDepth=10, maxStringLength=2000)):
        with pytest.raises(ManifestError, match="nested deeper than 10 levels"):
            parse_agent_manifest(data, source="a.yaml")
        with pytest.raises(ManifestError, match="longer than the limit of 2,000 characters"):
            parse_agent_manifest({**data, "metadata": {"text": "x" * 2001}}, source="a.yaml")
    assert current_limits() == DEFAULT_LIMITS  # restored on the way out


def test_strings_integers_and_surrogates_in_values_and_keys() -> None:
    base = {"schemaVersion": "1.0", "steps": []}
    cases = [
        ({"metadata": {"n": 10**100}}, "metadata.n", "more than 100 digits"),
        ({"metadata": {"s": "a\ud800b"}}, "metadata.s", "lone surrogate (\\ud800)"),
        ({"metadata": {"k\udfff": 1}}, "metadata", "a key contains a lone surrogate"),
        ({"metadata": {"x" * (MIB + 1): 1}}, "metadata", "a key longer than the limit"),
    ]
    for extra, field, reason in cases:
        with pytest.raises(ManifestError) as refused:
            parse_agent_manifest({**base, **extra}, source="a.yaml")
        assert (refused.value.field, reason in refused.value.reason) == (field, True)
        assert len(str(refused.value)) < 200  # a hostile key is quoted briefly


# -- both YAML loaders refuse the same -------------------------------------------------


@pytest.fixture(params=mi.YAML_LOADERS)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(mi, "YAML_LOADER", request.param)
    return str(request.param)


def test_libyaml_is_used_when_available() -> None:
    if yaml.__with_libyaml__:
        assert mi.YAML_LOADER == "libyaml" and mi.YAML_LOADERS == ("pure", "libyaml")
    else:
        assert mi.YAML_LOADERS == ("pure",)


ALIAS_BOMB = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 6) + "]" for i in range(1, 9)])

# (YAML, the refusal; None when the structure guard refuses what both loaded alike)
REFUSALS = [
    ("a: 1\na: 2\n", "line 2, column 1: found duplicate key 'a'"),
    ("a: {b: 1, b: 2}\n", "line 1, column 11: found duplicate key 'b'"),
    ("1: x\n0x1: y\n", "[\"1\"]: YAML reads the key '1' (line 1, column 1) as a number (1)"),
    ("a:\n  - {b: 1}\n  - {on: 2}\n", "x.yaml: a[1].on: YAML reads the key 'on' (line 3, "
     "column 6) as a boolean (true), and mapping keys must be text: quote it ('on':)"),
    ("a: &x {b: 1}\nc: [*x, *x, {~: 1}]\n", "c[2][\"~\"]: YAML reads the key '~' (line 2, "
     "column 14) as null"),
    ("a: !!python/object/apply:os.system [ls]\n", "could not determine a constructor for the tag"),
    ("a: !local x\n", "could not determine a constructor for the tag '!local'"),
    ("? [a, b]\n: c\n", "line 1, column 3: a mapping key must be a plain value"),
    ("{? {a: 1} : x}\n", "a mapping key must be a plain value"),
    ("[a]: 1\n", "line 1, column 1: a mapping key must be a plain value"),
    ("a: " + "9" * 101 + "\n", "a: an integer with more than 100 digits"),  # by the guard
    ("a: " + "9" * 103 + "\n", "line 1, column 4: an integer with more than 100 digits"),
    ("a: " + "1" * 5000 + "\n", "an integer with more than 100 digits"),
    ("a: 2024-13-45\n", "not a valid date or time (month must be in 1..12)"),
    ("b: &b {x: 1}\na: {<<: *b}\n", "could not determine a constructor for the tag"),
    ("a: 1\n---\nb: 2\n", "expected a single document in the stream"),
    ("a: [1, 2\n", "malformed YAML at line 2, column 1"),
    ("a: *nope\n", "found undefined alias"),
    ("a: \x00\n", "malformed YAML at character 4: unacceptable character #x0000"),
    ("[" * 5000 + "]" * 5000, None),  # deeper than any parser goes, either way
    (ALIAS_BOMB, None),
    ("m: &m {self: *m}\n", None),
    ("a: 2024-01-01\n", None),
    ("a: !!binary aGk=\n", None),
    ("a: .inf\n", None),
    ('a: "\\ud800"\n', None),
    ("? null\n: 1\n", None),
]


@pytest.mark.parametrize(("text", "refusal"), REFUSALS)
def test_both_loaders_refuse_the_same(loader: str, text: str, refusal: str | None) -> None:
    with pytest.raises(ManifestError) as refused:
        mi.check_structure(mi.parse_document(text, source="x.yaml"), source="x.yaml")
    message = str(refused.value)
    assert message.startswith("x.yaml: ") and "\n" not in message and len(message) < 300
    if refusal is not None:
        assert refusal in message


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.name)
def test_both_loaders_read_every_fixture_alike(path: Path) -> None:
    text = path.read_text()
    loaded = []
    for name in mi.YAML_LOADERS:
        mi.YAML_LOADER, before = name, mi.YAML_LOADER
        try:
            loaded.append(mi.parse_document(text, source=path.name))
        finally:
            mi.YAML_LOADER = before
    assert all(data == loaded[0] for data in loaded)
    assert loaded[0] == yaml.safe_load(text)


def test_both_loaders_type_plain_scalars_as_yaml_1_1_does(loader: str) -> None:
    text = ("a: yes\nb: ~\nc: 0x1f\nd: 1_000\ne: 1.5e3\nf: text\ng: '1'\nh: .nan\n"
            "i: <x\nk: 190:20:30\nl: -3\nm: +.5\n")
    assert repr(mi.parse_document(text, source="x")) == repr(yaml.safe_load(text))


# -- conditions -------------------------------------------------------------------------


def value_of(expression: str, scope: dict[str, Any] | None = None) -> Any:
    return compile_condition(expression).evaluate(scope or {})


def test_integer_arithmetic_is_javascript_doubles_past_2_53() -> None:
    assert value_of("9007199254740992 + 1") == 9007199254740992  # as JavaScript rounds
    assert isinstance(value_of("9007199254740993"), float)
    assert value_of("x * x * x * x * x * x * x * x", {"x": 10**40}) == math.inf
    assert value_of("1" + "0" * 5000 + " > 1") is True  # Infinity, not an int() of 5000 digits
    assert value_of("0" * 1000 + "7") == 7
    assert value_of('"0x' + "f" * 5000 + '" * 1') == math.inf
    assert isinstance(value_of("x // 1", {"x": 1e300}), float)


def test_an_expression_past_the_length_limit_does_not_compile() -> None:
    with pytest.raises(ConditionSyntaxError, match="longer than the limit of 16,384"):
        compile_condition("1 + " * 5000 + "1")
    with use_limits(InputLimits(conditionLength=256)), \
            pytest.raises(ConditionSyntaxError, match="longer than the limit of 256"):
        compile_condition("a" * 257)


@pytest.mark.parametrize(("expression", "scope", "reason"), [
    ("a == b && a == b && a == b && a == b", {"a": list(range(300_000)), "b": list(range(300_000))},
     "too costly to evaluate: more than 1,000,000 work units"),
    ("s + s", {"s": "x" * (MIB // 2 + 1)}, "builds a string longer than the limit"),
    ("1 in l || 2 in l || 3 in l || 4 in l", {"l": [[0]] * 400_000}, "too costly"),
    ('"x" in s || "x" in s', {"s": "y" * (MIB * 20)}, "too costly"),
])
def test_evaluation_cost_is_bounded(expression: str, scope: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConditionEvaluationError, match=reason):
        value_of(expression, scope)


def test_deep_values_fail_to_compare_rather_than_crash() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConditionEvaluationError, match="nested too deeply"):
        value_of("a == b", {"a": deep, "b": deep})


def test_number_parsing_of_long_text_is_linear() -> None:
    # The old pattern backtracked quadratically: hours for a megabyte of digits.
    assert value_of("s == 1", {"s": "1" * MIB + "x"}) is False
    assert value_of("s < 1", {"s": "1" * 100_000}) is False


def test_a_too_costly_condition_fails_its_step_with_a_clear_error() -> None:
    # The runtime config's limits hold in the engine, whatever host runs it.
    config = parse_config({"version": "1.0", "limits": {"conditionCost": 1000}}, source="c")
    result = Harness(scripted(), config=config).run(manifest(
        {"id": "a", "type": "prompt", "prompt": "hi", "when": "big == big"},
        variables=[{"key": "big", "type": "array", "value": list(range(5000))}]))
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["type"] == "condition_error"
    assert result.error["message"].startswith("step a: when: too costly to evaluate")

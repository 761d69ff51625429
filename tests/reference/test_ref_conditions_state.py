"""Ports of packages/condition-jexl/src/index.test.ts and packages/core/src/state.test.ts."""

from __future__ import annotations

from typing import Any

import pytest
from reference_harness import Host, StandInChild, agent, declared

from agent_runtime import RunStatus
from agent_runtime.conditions import evaluate_condition
from agent_runtime.errors import ManifestError
from agent_runtime.testing import scripted


def test_evaluates_direct_jexl_expressions_against_variables() -> None:
    """condition-jexl/src/index.test.ts: "evaluates direct JEXL expressions against variables"."""
    assert evaluate_condition("count >= 2 && enabled", {"count": 2, "enabled": True}) is True


def test_supports_case_insensitive_nested_handlebars_operands() -> None:
    """condition-jexl/src/index.test.ts: "supports case-insensitive nested handlebars operands".
    (`resolveConditionExpression`, the reference's textual substitution, has no Python
    counterpart: operands are resolved while evaluating, with the same result.)"""
    variables = {"Result": {"Status": "ready"}, "attempts": "3"}
    assert evaluate_condition('{{ result.status }} == "ready" && {{ attempts }} >= 2',
                              variables) is True


def test_returns_true_for_a_blank_condition() -> None:
    """condition-jexl/src/index.test.ts: "returns true for a blank condition"; and a step whose
    `when` is blank runs (core: `if (!step.when) return true`)."""
    assert evaluate_condition("  ", {}) is True
    host = Host(model=scripted(responses=[{"text": "ran"}]))
    result = host.run(agent({"id": "a", "type": "prompt", "prompt": "Go.", "when": "  "}))
    assert (result.status, result.output) == (RunStatus.COMPLETED, "ran")


def test_applies_dotted_set_paths_consistently() -> None:
    """core/src/state.test.ts: "applies dotted set and unset paths consistently". A manifest
    sets dotted paths through a loop's itemVariable and resultVariable: each sets its nested
    value and keeps the object's other fields (`unset` has no manifest surface)."""
    host = Host(child=StandInChild(lambda step, variables: 9))
    result = host.run(agent(
        {"id": "each", "type": "loop",
         "loop": {"source": "names", "itemVariable": "client.name",
                  "resultVariable": "client.score"},
         "steps": [{"id": "score", "type": "prompt", "prompt": "Score."}]},
        variables=declared({"names": ["New"], "client": {"name": "Old", "retained": True}})))
    assert host.variables(result.run_id)["client"] == {"name": "New", "retained": True,
                                                       "score": 9}


@pytest.mark.parametrize("path", ["__proto__", "safe.__proto__.polluted",
                                  "constructor.prototype.polluted"])
def test_rejects_prototype_sensitive_paths(path: str) -> None:
    """core/src/state.test.ts: "rejects prototype-sensitive path %s" (refused when the
    manifest is validated, naming the field)."""
    step: dict[str, Any] = {"id": "each", "type": "loop", "loop": {"itemVariable": path},
                            "steps": [{"id": "a", "type": "prompt", "prompt": "A."}]}
    with pytest.raises(ManifestError) as raised:
        agent(step)
    assert raised.value.field == "steps[0].loop.itemVariable"

"""`loop` steps: collection loops and goal loops, with the reference semantics.

With no `source` the loop runs `maxIterations` times (default 1) over the
indices. A `source` names a variable path: an array is iterated; a string is
parsed as JSON or else split by `delimiter` (default newline; items trimmed,
empty ones dropped); an object yields its first array value; anything else
yields no items. Each iteration binds `itemVariable` (default `item`),
`indexVariable` (default `index`, as a string) and `loop` (`index`,
`iteration`, `outputs`, `previous`) in the run's variables, a dotted name
setting a nested value; they stay set after the loop, as in the reference.
`condition` is checked before each iteration (false skips it and binds
nothing), `goal` after each (true ends the loop). An iteration's result is
`resultVariable`'s value when a child writes that variable, else the last
output a child produced; it is stored at `resultVariable` too. After an
iteration `loop.current` is that iteration and `loop.previous` the one before,
each `{index, iteration, output, variables}`; after the loop, `loop.outputs`,
`loop.goalMet` and `loop.goalMetAtIteration` say how it ended. The output:
`final` -> the last result; else the list of results, or, when the items
were not structured (plain text, or no source), the results joined by blank
lines.

Durability: the items are saved once, as a step result, when the loop starts;
each iteration's result is saved as a step result when it ends. The loop's
frame keeps counters, the last output and the previous iteration, so a
resumed loop rebuilds `loop.outputs` from the saved results.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from stores.records import Frame

from agent_runtime.execution import join_path
from agent_runtime.state import COMPLETED, ITERATION, LOOP_ITEMS, SKIPPED, STEP
from agent_runtime.templates import MISSING, resolve_path

if TYPE_CHECKING:
    from agent_runtime.execution import Execution

DEFAULT_ITEM_VARIABLE = "item"
DEFAULT_INDEX_VARIABLE = "index"


def loop_items(source_value: Any, delimiter: str | None) -> tuple[list[Any], bool]:
    """(items, whether they are structured: an array, not text split by `delimiter`)."""
    value = source_value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            parts = [part.strip() for part in source_value.split(delimiter or "\n")]
            return [part for part in parts if part], False
    if isinstance(value, list):
        return value, True
    if isinstance(value, dict):
        for nested in value.values():
            if isinstance(nested, list):
                return nested, True
    return [], False


def source_path(source: str) -> str:
    """A source may be written as a template (`{{ topics }}`): the path inside it."""
    path = source.strip()
    if path.startswith("{{"):
        path = path[2:].lstrip()
    if path.endswith("}}"):
        path = path[:-2].rstrip()
    return path


def bind(variables: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path (`itemVariable: current.item`) in the variables, replacing a
    non-object on the way by an object, as the reference's `setVariableAtPath`."""
    head, *rest = path.split(".")
    if not rest:
        variables[head] = value
        return
    inner = variables.get(head)
    if not isinstance(inner, dict):
        inner = variables[head] = {}
    bind(inner, ".".join(rest), value)


def _base(path: str | None) -> str:
    return (path or "").split(".")[0].strip().lower()


class LoopStepExecutor:
    async def execute(self, step: Any, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> Any:
        spec = step.loop
        state = frame.continuation
        if "count" not in state:
            self._start(step, frame, ctx)
        items_entry = ctx.state.result(LOOP_ITEMS, frame.step_path)
        items: list[Any] = [] if items_entry is None else items_entry["items"]
        variables = ctx.state.variables
        while state["next"] < state["count"]:
            index = state["next"]
            iteration_path = join_path(frame.step_path, index)
            if state.get("entered") != index:
                results = self._results(ctx, frame.step_path, index)
                bindings = self._bindings(spec, variables, items, index,
                                          {"outputs": results, "previous": state.get("previous")})
                ctx.scopes.append(bindings)
                try:
                    skipped = spec.condition is not None and not ctx.condition(
                        spec.condition, step_path=iteration_path, field="loop.condition")
                finally:
                    ctx.scopes.pop()
                if skipped:
                    ctx.state.add_result({"kind": ITERATION, "step_path": iteration_path,
                                          "status": SKIPPED})
                    ctx.events.emit("loop.iteration.skipped", step_id=step.id,
                                    step_path=iteration_path, iteration=index)
                    self._advance(frame, index + 1)
                    await ctx.checkpoint()
                    continue
                variables.update(bindings)
                state["entered"] = index
                ctx.events.emit("loop.iteration.started", step_id=step.id,
                                step_path=iteration_path, iteration=index)
            await ctx.run_sequence(step.steps, prefix=iteration_path,
                                   loop_iteration=index, resume=resume)
            resume = []
            self._complete_iteration(step, frame, ctx, index)
            goal_met = spec.goal is not None and ctx.condition(
                spec.goal, step_path=iteration_path, field="loop.goal")
            if goal_met:
                state.update({"goalMet": True, "goalMetAtIteration": index + 1})
                ctx.events.emit("loop.goal.met", step_id=step.id, step_path=frame.step_path,
                                iteration=index)
            ctx.events.emit("loop.iteration.completed", step_id=step.id,
                            step_path=iteration_path, iteration=index)
            self._advance(frame, state["count"] if goal_met else index + 1)
            await ctx.checkpoint()
        outputs = self._results(ctx, frame.step_path, state["count"])
        loop_state = variables.get("loop")
        variables["loop"] = {**(loop_state if isinstance(loop_state, dict) else {}),
                             "outputs": copy.deepcopy(outputs),
                             "goalMet": bool(state.get("goalMet")),
                             "goalMetAtIteration": state.get("goalMetAtIteration")}
        if (spec.output_mode or "array") == "final":
            return outputs[-1] if outputs else None
        if state.get("text"):
            return "\n\n".join(output if isinstance(output, str) else
                                json.dumps(output, separators=(",", ":"))
                                for output in outputs)
        return outputs

    @staticmethod
    def _bindings(spec: Any, variables: dict[str, Any], items: list[Any], index: int,
                  so_far: dict[str, Any]) -> dict[str, Any]:
        """The top-level variables an iteration sets: item, index and `loop`, each
        copied before a dotted path changes it, so a skipped iteration changes nothing."""
        bindings: dict[str, Any] = {}
        for path, value in ((spec.item_variable or DEFAULT_ITEM_VARIABLE,
                             copy.deepcopy(items[index]) if index < len(items) else None),
                            (spec.index_variable or DEFAULT_INDEX_VARIABLE, str(index))):
            head = path.split(".")[0]
            if head not in bindings and head in variables:
                bindings[head] = copy.deepcopy(variables[head])
            bind(bindings, path, value)
        bindings["loop"] = {"index": index, "iteration": index + 1, **copy.deepcopy(so_far)}
        return bindings

    def _complete_iteration(self, step: Any, frame: Frame, ctx: Execution, index: int) -> None:
        spec = step.loop
        state = frame.continuation
        variables = ctx.state.variables
        iteration_path = join_path(frame.step_path, index)
        last = self._last_output(step, ctx, iteration_path)
        if last is not MISSING:
            state["lastOutput"] = last
        result = state.get("lastOutput")
        if spec.result_variable and any(_base(child.output_variable) == _base(
                spec.result_variable) for child in step.steps):
            written = resolve_path(variables, spec.result_variable)
            if written is not MISSING and written is not None:
                result = written
        result = copy.deepcopy(result)
        if spec.result_variable:
            bind(variables, spec.result_variable, copy.deepcopy(result))
        ctx.state.add_result({"kind": ITERATION, "step_path": iteration_path,
                              "status": COMPLETED, "output": result})
        outputs = self._results(ctx, frame.step_path, index + 1)
        snapshot = {key: copy.deepcopy(value) for key, value in variables.items()
                    if key != "loop"}
        current = {"index": index, "iteration": index + 1, "output": copy.deepcopy(result),
                   "variables": snapshot}
        variables["loop"] = {"index": index, "iteration": index + 1,
                             "outputs": copy.deepcopy(outputs),
                             "previous": copy.deepcopy(state.get("previous")),
                             "current": current}
        state["previous"] = copy.deepcopy(current)

    def _start(self, step: Any, frame: Frame, ctx: Execution) -> None:
        spec = step.loop
        if spec.source is None or not spec.source.strip():
            items: list[Any] = list(range(spec.max_iterations or 1))
            text = True
        else:
            value = resolve_path(ctx.scope(), source_path(spec.source))
            items, structured = loop_items(None if value is MISSING else value, spec.delimiter)
            text = not structured
        count = len(items) if spec.max_iterations is None else min(len(items),
                                                                   spec.max_iterations)
        ctx.state.add_result({"kind": LOOP_ITEMS, "step_path": frame.step_path,
                              "items": items[:count]})
        frame.continuation.update({"count": count, "next": 0, "text": text})
        ctx.events.emit("loop.started", step_id=step.id, step_path=frame.step_path,
                        iterations=count)

    @staticmethod
    def _advance(frame: Frame, next_index: int) -> None:
        frame.continuation["next"] = next_index
        frame.continuation.pop("entered", None)
        frame.child_index = None

    @staticmethod
    def _results(ctx: Execution, loop_path: str, upto: int) -> list[Any]:
        outputs = []
        for index in range(upto):
            entry = ctx.state.result(ITERATION, join_path(loop_path, index))
            if entry is not None and entry["status"] == COMPLETED:
                outputs.append(entry["output"])
        return outputs

    @staticmethod
    def _last_output(step: Any, ctx: Execution, iteration_path: str) -> Any:
        """The output of the last child that ran in this iteration, or MISSING."""
        for child in reversed(step.steps):
            entry = ctx.state.result(STEP, join_path(iteration_path, child.id))
            if entry is not None and entry["status"] == COMPLETED:
                return entry["output"]
        return MISSING

"""`loop` steps: collection loops and goal loops, with the reference semantics.

With no `source` the loop runs `maxIterations` times (default 1). A `source`
names a variable path: an array is iterated; a string is parsed as JSON or
else split by `delimiter` (default newline; items trimmed, empty ones
dropped); an object yields its first array value. `condition` is checked
before each iteration (false skips it), `goal` after each (true ends the
loop). An iteration's result is `resultVariable`'s value when a child writes
it, else the last child's output.

Durability: the items are saved once, as a step result, when the loop starts;
each iteration's result is saved as a step result when it ends. The loop's
frame keeps only counters, so a checkpoint inside a long loop stays small and
a resumed loop rebuilds `loop.outputs` from the saved results.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from stores.records import Frame

from agent_runtime.execution import join_path
from agent_runtime.state import COMPLETED, ITERATION, LOOP_ITEMS, SKIPPED, STEP
from agent_runtime.templates import MISSING, resolve_path

if TYPE_CHECKING:
    from agent_runtime.execution import Execution


def loop_items(source_value: Any, delimiter: str | None) -> tuple[list[Any], bool]:
    """(items, whether the source was plain text)."""
    if source_value is None or source_value is MISSING:
        return [], False
    if isinstance(source_value, list):
        return source_value, False
    if isinstance(source_value, str):
        try:
            parsed = json.loads(source_value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return parsed, False
        if isinstance(parsed, dict):
            return loop_items(parsed, delimiter)
        parts = [part.strip() for part in source_value.split(delimiter or "\n")]
        return [part for part in parts if part], True
    if isinstance(source_value, dict):
        for value in source_value.values():
            if isinstance(value, list):
                return value, False
        return [], False
    return [source_value], False


def _assign(scope: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path (`itemVariable: current.item`) inside a scope."""
    head, *rest = path.split(".")
    if not rest:
        scope[head] = value
        return
    inner = scope.setdefault(head, {})
    if not isinstance(inner, dict):
        inner = scope[head] = {}
    _assign(inner, ".".join(rest), value)


class LoopStepExecutor:
    async def execute(self, step: Any, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> Any:
        spec = step.loop
        state = frame.continuation
        if "count" not in state:
            self._start(step, frame, ctx)
        items_entry = ctx.state.result(LOOP_ITEMS, frame.step_path)
        items: list[Any] | None = None if items_entry is None else items_entry["items"]
        while state["next"] < state["count"]:
            index = state["next"]
            results = self._results(ctx, frame.step_path, index)
            scope: dict[str, Any] = {"loop": {
                "index": index, "iteration": index + 1, "outputs": results,
                "previous": results[-1] if results else None,
            }}
            if items is not None and spec.item_variable:
                _assign(scope, spec.item_variable, items[index])
            if spec.index_variable:
                _assign(scope, spec.index_variable, index)
            iteration_path = join_path(frame.step_path, index)
            ctx.scopes.append(scope)
            try:
                entered = state.get("entered") == index
                if not entered and spec.condition is not None and not ctx.condition(
                        spec.condition, step_path=iteration_path, field="loop.condition"):
                    ctx.state.add_result({"kind": ITERATION, "step_path": iteration_path,
                                          "status": SKIPPED})
                    ctx.events.emit("loop.iteration.skipped", step_id=step.id,
                                    step_path=iteration_path, iteration=index)
                    self._advance(frame, index + 1)
                    await ctx.checkpoint()
                    continue
                if not entered:
                    state["entered"] = index
                    ctx.events.emit("loop.iteration.started", step_id=step.id,
                                    step_path=iteration_path, iteration=index)
                await ctx.run_sequence(step.steps, prefix=iteration_path,
                                       loop_iteration=index, resume=resume)
                resume = []
                result = self._iteration_result(step, ctx, iteration_path)
                ctx.state.add_result({"kind": ITERATION, "step_path": iteration_path,
                                      "status": COMPLETED, "output": result})
                if spec.result_variable:
                    ctx.state.variables[spec.result_variable] = result
                ctx.events.emit("loop.iteration.completed", step_id=step.id,
                                step_path=iteration_path, iteration=index)
                scope["loop"]["outputs"] = [*results, result]
                scope["loop"]["previous"] = result
                goal_met = spec.goal is not None and ctx.condition(
                    spec.goal, step_path=iteration_path, field="loop.goal")
            finally:
                ctx.scopes.pop()
            if goal_met:
                ctx.events.emit("loop.goal.met", step_id=step.id, step_path=frame.step_path,
                                iteration=index)
            self._advance(frame, state["count"] if goal_met else index + 1)
            await ctx.checkpoint()
        outputs = self._results(ctx, frame.step_path, state["count"])
        if (spec.output_mode or "array") == "final":
            return outputs[-1] if outputs else None
        if state.get("text"):
            return "\n\n".join(str(output) for output in outputs)
        return outputs

    def _start(self, step: Any, frame: Frame, ctx: Execution) -> None:
        spec = step.loop
        if spec.source is None:
            count = spec.max_iterations or 1
            text = False
        else:
            value = resolve_path(ctx.scope(), spec.source)
            items, text = loop_items(value, spec.delimiter)
            count = len(items) if spec.max_iterations is None else min(
                len(items), spec.max_iterations)
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
    def _iteration_result(step: Any, ctx: Execution, iteration_path: str) -> Any:
        ran = []
        for child in step.steps:
            entry = ctx.state.result(STEP, join_path(iteration_path, child.id))
            if entry is not None and entry["status"] == COMPLETED:
                ran.append((child, entry))
        result_variable = step.loop.result_variable
        if result_variable:
            for child, entry in reversed(ran):
                if child.output_variable == result_variable:
                    return entry["output"]
        if not ran:
            return None
        return ran[-1][1]["output"]


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

Durability: a loop with a source saves its items once, as a step result,
when it starts; a loop with no source saves only its count, so neither memory
nor a checkpoint grows with `maxIterations` (its items are the indices, read
from a `range`). Each iteration's result is saved as a step result when it
ends, and only the iterations that ran are ever scanned. The loop's
frame keeps counters, the last output and where the previous iteration ended;
`loop` itself is a scope while the loop runs (saved in the variables only
when it ends), so a checkpoint inside a long loop stays small, and a resumed
loop rebuilds `loop.outputs` from the saved results and `loop.previous` from
the checkpoint that ended it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from stores.records import Frame, JsonObject, JsonValue, json_copy

from agent_runtime.errors import StepFailed
from agent_runtime.execution import join_path
from agent_runtime.manifest import LoopSpec, LoopStep
from agent_runtime.state import COMPLETED, ITERATION, LOOP_ITEMS, SKIPPED, STEP
from agent_runtime.templates import MISSING, Missing, resolve_path

if TYPE_CHECKING:
    from agent_runtime.execution import Execution

DEFAULT_ITEM_VARIABLE = "item"
DEFAULT_INDEX_VARIABLE = "index"


def loop_items(source_value: JsonValue, delimiter: str | None) -> tuple[list[JsonValue], bool]:
    """(items, whether they are structured: an array, not text split by `delimiter`)."""
    value = source_value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            parts = [part.strip() for part in str(source_value).split(delimiter or "\n")]
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


def bind(variables: JsonObject, path: str, value: JsonValue) -> None:
    """Set a dotted path (`itemVariable: current.item`) in the variables, replacing a
    non-object on the way by an object, as the reference's `setVariableAtPath`."""
    head, *rest = path.split(".")
    if not rest:
        variables[head] = value
        return
    inner = variables.get(head)
    # A copy of the object on the way: the one there may be shared with a saved
    # step result or a snapshot of `loop.previous`, which must not change.
    inner = variables[head] = dict(inner) if isinstance(inner, dict) else {}
    bind(inner, ".".join(rest), value)


class LoopContinuation(TypedDict, total=False):
    """What a loop keeps in its frame between commit points (JSON, as saved)."""

    count: int  # iterations to run
    next: int  # the next iteration's index
    text: bool  # items were split from text: an `array` output is joined text
    entered: int  # the iteration whose bindings are set (its condition passed)
    goalMet: bool
    goalMetAtIteration: int
    lastOutput: JsonValue  # the last child output seen in the current iteration
    # The last and the one before it completed iterations, and the checkpoint
    # that ended each: `loop.previous` (and `current`) after a resume. The
    # checkpoint is named by its run and seq: a fork starts from a copy of one
    # checkpoint under new numbering, and the ones before it stay in the run
    # forked from (a frame saved before runs were named: this run's).
    previousIndex: int | None
    previousSeq: int | None
    previousRun: str | None
    olderIndex: int | None
    olderSeq: int | None
    olderRun: str | None


def _continuation(frame: Frame) -> LoopContinuation:
    # A typed view of the frame's own dict: the frame saves it at every checkpoint.
    return cast(LoopContinuation, frame.continuation)


def _counts(spec: LoopSpec) -> bool:
    """A loop with no source (or a blank one) runs over its indices."""
    return spec.source is None or not spec.source.strip()


def _base(path: str | None) -> str:
    return (path or "").split(".")[0].strip().lower()


class LoopStepExecutor:
    async def execute(self, step: LoopStep, frame: Frame, ctx: Execution,
                      resume: list[Frame]) -> JsonValue:
        spec = step.loop
        state = _continuation(frame)
        if "count" not in state:
            self._start(step, frame, ctx)
        items = self._items(step.loop, frame, ctx)
        variables = ctx.state.variables
        # `loop` (index, outputs, previous, current) lives in a scope while the
        # loop runs, not in the saved variables: its outputs and the variable
        # snapshots of `previous`/`current` grow with the iterations, and saving
        # them at every commit point would make storage grow with the square of
        # the loop. The outputs come back from the saved iteration results and
        # `previous`'s snapshot from the checkpoint saved when it ended.
        outputs = self._results(ctx, frame.step_path, state["next"])
        previous = self._saved_iteration(ctx, state, outputs, "previous")
        finished: JsonObject | None = None
        if previous is not None and state["next"] >= state["count"]:
            # Resumed after its last iteration: `loop` as that iteration left it.
            finished = {"index": previous["index"], "iteration": previous["iteration"],
                        "outputs": outputs, "current": previous,
                        "previous": self._saved_iteration(ctx, state, outputs, "older")}
        while state["next"] < state["count"]:
            index = state["next"]
            iteration_path = join_path(frame.step_path, index)
            loop_scope = {"index": index, "iteration": index + 1, "outputs": outputs,
                          "previous": previous}
            bindings = self._bindings(spec, variables, items, index)
            if state.get("entered") != index:
                ctx.scopes.append({**bindings, "loop": loop_scope})
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
                if ctx.events.listening:
                    ctx.events.emit("loop.iteration.started", step_id=step.id,
                                    step_path=iteration_path, iteration=index)
            ctx.scopes.append({"loop": loop_scope})
            try:
                # The iteration's own checkpoint below is the last step's.
                await ctx.run_sequence(step.steps, prefix=iteration_path,
                                       loop_iteration=index, resume=resume,
                                       checkpoint_last=False)
                resume = []
                current = self._complete_iteration(step, frame, ctx, index)
                outputs.append(current["output"])
                finished = {**loop_scope, "outputs": outputs, "current": current}
                ctx.scopes[-1] = {"loop": finished}
                goal_met = spec.goal is not None and ctx.condition(
                    spec.goal, step_path=iteration_path, field="loop.goal")
            finally:
                ctx.scopes.pop()
            previous = current
            if goal_met:
                state.update({"goalMet": True, "goalMetAtIteration": index + 1})
                ctx.events.emit("loop.goal.met", step_id=step.id, step_path=frame.step_path,
                                iteration=index)
            if ctx.events.listening:
                ctx.events.emit("loop.iteration.completed", step_id=step.id,
                                step_path=iteration_path, iteration=index)
            self._advance(frame, state["count"] if goal_met else index + 1)
            # The checkpoint below holds the variables `previous` snapshots.
            state["olderSeq"], state["olderRun"] = (state.get("previousSeq"),
                                                    state.get("previousRun"))
            state["previousSeq"], state["previousRun"] = ctx.state.seq + 1, ctx.run_id
            await ctx.checkpoint()
        # One copy of the results, both `loop.outputs` and the loop's output: values
        # are replaced, never changed in place, and a checkpoint then stores the
        # list once (stores/deltas.py, shared outputs), however long the loop.
        outputs = cast(list[JsonValue],
                       json_copy(self._results(ctx, frame.step_path, state["count"])))
        base = finished if finished is not None else variables.get("loop")
        variables["loop"] = {**(json_copy(base) if isinstance(base, dict) else {}),
                             "outputs": outputs,
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
    def _bindings(spec: LoopSpec, variables: JsonObject, items: Sequence[JsonValue],
                  index: int) -> JsonObject:
        """The top-level variables an iteration sets, item and index, each copied
        before a dotted path changes it, so a skipped iteration changes nothing."""
        bindings: JsonObject = {}
        for path, value in ((spec.item_variable or DEFAULT_ITEM_VARIABLE,
                             json_copy(items[index]) if index < len(items) else None),
                            (spec.index_variable or DEFAULT_INDEX_VARIABLE, str(index))):
            head = path.split(".")[0]
            if head not in bindings and head in variables:
                bindings[head] = json_copy(variables[head])
            bind(bindings, path, value)
        return bindings

    @staticmethod
    def _saved_iteration(ctx: Execution, state: LoopContinuation, outputs: list[JsonValue],
                         which: Literal["previous", "older"]) -> JsonObject | None:
        """The last (`previous`) or the one before it (`older`) completed iteration
        when a loop resumes, with the variables saved by the checkpoint that ended it."""
        if which == "previous":
            seq, run_id = state.get("previousSeq"), state.get("previousRun")
            done, back = state.get("previousIndex"), 1
        else:
            seq, run_id = state.get("olderSeq"), state.get("olderRun")
            done, back = state.get("olderIndex"), 2
        if seq is None or done is None or len(outputs) < back:
            return None
        run_id = run_id or ctx.run_id
        saved = ctx.store.load_checkpoint(run_id, seq)
        if saved is None:
            # Never silently empty: the run this one was forked from was deleted.
            raise StepFailed("checkpoint_unavailable", (
                f"loop.{which} cannot be rebuilt: checkpoint {seq} of run {run_id}, which "
                "holds its variables, no longer exists"), {"run_id": run_id, "seq": seq})
        snapshot = {key: value for key, value in saved.variables.items() if key != "loop"}
        return {"index": done, "iteration": done + 1, "output": outputs[-back],
                "variables": snapshot}

    def _complete_iteration(self, step: LoopStep, frame: Frame, ctx: Execution,
                            index: int) -> JsonObject:
        """Save the iteration's result; return it as `loop.current`."""
        spec = step.loop
        state = _continuation(frame)
        variables = ctx.state.variables
        iteration_path = join_path(frame.step_path, index)
        last = self._last_output(step, ctx, iteration_path)
        if not isinstance(last, Missing):
            state["lastOutput"] = last
        result = state.get("lastOutput")
        if spec.result_variable and any(_base(child.output_variable) == _base(
                spec.result_variable) for child in step.steps):
            written = resolve_path(variables, spec.result_variable)
            if written is not MISSING and written is not None:
                result = written
        result = json_copy(result)
        if spec.result_variable:
            bind(variables, spec.result_variable, json_copy(result))
        ctx.state.add_result({"kind": ITERATION, "step_path": iteration_path,
                              "status": COMPLETED, "output": result})
        state["olderIndex"] = state.get("previousIndex")
        state["previousIndex"] = index
        # A shallow snapshot: a variable's value is replaced, never changed in
        # place (`bind` copies what it walks), so sharing the values is safe.
        snapshot = {key: value for key, value in variables.items() if key != "loop"}
        return {"index": index, "iteration": index + 1, "output": result,
                "variables": snapshot}

    @staticmethod
    def _items(spec: LoopSpec, frame: Frame, ctx: Execution) -> Sequence[JsonValue]:
        """The items the loop iterates, as saved when it started.

        A loop with no source counts: its items are its indices, a `range` as
        small at 10**15 iterations as at 1. Checkpoints from before it counted
        also hold those indices as a `loop-items` result, `[0, 1, ..., count-1]`;
        that entry says nothing the count does not, so it is never read, and
        such a loop resumes exactly as one started today.
        """
        if _counts(spec):
            return range(_continuation(frame)["count"])
        saved = ctx.state.result(LOOP_ITEMS, frame.step_path)
        items: list[JsonValue] = [] if saved is None else saved["items"]
        return items

    def _start(self, step: LoopStep, frame: Frame, ctx: Execution) -> None:
        spec = step.loop
        items: list[JsonValue] | None = None
        if _counts(spec):
            count = spec.max_iterations or 1
            text = True
        else:
            value = resolve_path(ctx.scope(), source_path(spec.source or ""))
            items, structured = loop_items(None if value is MISSING else value, spec.delimiter)
            text = not structured
            count = len(items) if spec.max_iterations is None else min(len(items),
                                                                       spec.max_iterations)
        # A source's items are known only now; a counting loop was checked before the
        # run existed, maybe under an older policy: the host's limit, asked at use.
        refusal = ctx.runtime.policy.iterations_refusal(count)
        if refusal is not None:
            raise StepFailed("loop_too_long", f"step {frame.step_path}: {refusal}")
        if items is not None:
            ctx.state.add_result({"kind": LOOP_ITEMS, "step_path": frame.step_path,
                                  "items": items[:count]})
        _continuation(frame).update({"count": count, "next": 0, "text": text})
        ctx.events.emit("loop.started", step_id=step.id, step_path=frame.step_path,
                        iterations=count)

    @staticmethod
    def _advance(frame: Frame, next_index: int) -> None:
        state = _continuation(frame)
        state["next"] = next_index
        state.pop("entered", None)
        frame.child_index = None

    @staticmethod
    def _results(ctx: Execution, loop_path: str, upto: int) -> list[JsonValue]:
        """The completed iterations' results, of the iterations before `upto` that ran.

        Every iteration that ran saved a result (completed or skipped), in order,
        and the first one without is where the loop stopped: the scan ends there,
        so a goal met at iteration 3 of 10**12 (which moves `next` to the end)
        reads 3 results, not 10**12 lookups.
        """
        outputs = []
        for index in range(upto):
            entry = ctx.state.result(ITERATION, join_path(loop_path, index))
            if entry is None:
                break
            if entry["status"] == COMPLETED:
                outputs.append(entry["output"])
        return outputs

    @staticmethod
    def _last_output(step: LoopStep, ctx: Execution,
                     iteration_path: str) -> JsonValue | Missing:
        """The output of the last child that ran in this iteration, or MISSING."""
        for child in reversed(step.steps):
            entry = ctx.state.result(STEP, join_path(iteration_path, child.id))
            if entry is not None and entry["status"] == COMPLETED:
                output: JsonValue = entry["output"]
                return output
        missing: Missing = MISSING
        return missing

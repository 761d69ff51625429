"""`--stream`: a readable live view of a run's events for a terminal.

One line per thing a person cares about: a step starting and finishing with
its duration and tokens, model calls, tool calls, loop iterations, approvals
and suspensions. Events carry no prompt text or values; the model's text is
shown as it arrives only through `text`, the runtime's separate text channel
(`AgentRuntime(text_sink=view.text)`), which nothing logs or stores; with
`--show-reasoning`, the reasoning a model streams the same way through
`reasoning` (`AgentRuntime(reasoning_sink=view.reasoning)`).

Everything printed is escaped for the terminal (`excerpts.printable`): model
text keeps its newlines and tabs, event lines are one line each, and no
control character a model or a user chose reaches the terminal raw.
"""

from __future__ import annotations

import sys
from typing import TextIO

from agent_runtime.events import Event
from agent_runtime.excerpts import printable


def _depth(step_path: str | None) -> int:
    # step paths alternate step ids and loop iterations: loop/2/child
    return 0 if not step_path else step_path.count("/") // 2


def _ms(value: object) -> str:
    if not isinstance(value, int | float):
        return ""
    return f"{value / 1000:.2f}s" if value >= 1000 else f"{int(value)}ms"


def _tool(data: dict[str, object]) -> str:
    # A tool the step offered is named in events; one the model made up only by a
    # fingerprint of its name (agent_runtime/events.py).
    call = data.get("call")
    number = f" {call + 1}" if isinstance(call, int) else ""
    name = data.get("tool")
    if isinstance(name, str):
        return f"tool call{number} {name}"
    return f"tool call{number} [unknown tool {data.get('tool_sha256', '?')}]"


class StreamView:
    """An event sink that prints a line per interesting event."""

    def __init__(self, out: TextIO | None = None, *, show_checkpoints: bool = False) -> None:
        self._out = out or sys.stderr
        self._show_checkpoints = show_checkpoints
        self._model: dict[str, str] = {}
        self._usage: dict[str, str] = {}
        self._iterations: dict[str, int] = {}
        self._text_path: str | None = None  # the step whose text is being shown

    def text(self, step_path: str, delta: str) -> None:
        """Show a model's text delta, indented under its step (a `TextSink`)."""
        indent = "  " * (_depth(step_path) + 2)
        if self._text_path != step_path:
            self._end_text()
            self._out.write(indent)
            self._text_path = step_path
        self._out.write(printable(delta).replace("\n", "\n" + indent))
        self._out.flush()

    def reasoning(self, step_path: str, delta: str) -> None:
        """Show a model's reasoning delta, marked as such (`--show-reasoning`)."""
        indent = "  " * (_depth(step_path) + 2)
        self._end_text()
        for line in printable(delta).splitlines():
            if line.strip():
                self._out.write(f"{indent}reasoning: {line}\n")
        self._out.flush()

    def _end_text(self) -> None:
        if self._text_path is not None:
            self._out.write("\n")
            self._text_path = None

    def _write(self, line: str) -> None:
        """One line: whatever it quotes from events is escaped, newlines included."""
        self._end_text()
        self._out.write(printable(line, multiline=False) + "\n")

    def _line(self, event: Event, text: str, *, depth: int | None = None) -> None:
        indent = "  " * (1 + (_depth(event.step_path) if depth is None else depth))
        self._write(f"{indent}{text}")

    def emit(self, event: Event) -> None:
        data = event.data
        name = event.step_path or event.step_id or ""
        kind = event.type
        if kind == "run.started":
            self._write(f"run {event.run_id} started (attempt {event.attempt})")
        elif kind == "run.resumed":
            self._write(f"run {event.run_id} resumed (attempt {event.attempt}) "
                        f"from checkpoint {data.get('from_seq')}")
        elif kind == "step.started":
            resumed = " (resumed)" if data.get("resumed") else ""
            self._line(event, f"> {name} [{data.get('kind')}]{resumed}")
        elif kind == "step.completed":
            tokens = f", {data['tokens']} tokens" if data.get("tokens") else ""
            self._line(event, f"ok {name} in {_ms(data.get('duration_ms'))}{tokens}")
        elif kind == "step.skipped":
            self._line(event, f"- {name} skipped (when is false)")
        elif kind == "model.started":
            model = str(data.get("model", ""))
            # a scripted model's name is a script path: its file name is enough
            self._model[name] = f"{data.get('provider')}/{model.rsplit('/', 1)[-1]}"
        elif kind in ("model.text.delta", "model.reasoning.delta"):
            pass  # no text in events by design: it arrives through `text` and `reasoning`
        elif kind == "model.usage":
            self._usage[name] = (f", {data.get('input_tokens', '?')} in / "
                                 f"{data.get('output_tokens', '?')} out tokens")
        elif kind == "model.completed":
            calls = data.get("tool_calls")
            tail = f", asks for {calls} tool call(s)" if calls else ""
            self._line(event, f"model {self._model.pop(name, '?')}: "
                              f"{_ms(data.get('duration_ms'))}{self._usage.pop(name, '')}{tail}",
                       depth=_depth(name) + 1)
        elif kind == "model.tool.started":
            self._line(event, f"{_tool(data)} ...", depth=_depth(name) + 1)
        elif kind == "model.tool.completed":
            status = data.get("error_type") or ("replayed from the ledger" if data.get("replayed")
                                                else "ok")
            self._line(event, f"{_tool(data)} {status} "
                              f"{_ms(data.get('duration_ms'))}".rstrip(), depth=_depth(name) + 1)
        elif kind == "loop.started":
            self._iterations[name] = int(data.get("iterations") or 0)
            self._line(event, f"loop {name}: {data.get('iterations')} iteration(s)")
        elif kind in ("loop.iteration.started", "loop.iteration.skipped"):
            loop = name.rsplit("/", 1)[0]
            index = int(data.get("iteration") or 0)
            total = self._iterations.get(loop)
            label = f"iteration {index + 1}" + (f" of {total}" if total else "")
            skipped = " skipped (condition is false)" if kind.endswith("skipped") else ""
            self._line(event, label + skipped, depth=_depth(name))
        elif kind == "loop.goal.met":
            self._line(event, f"goal met after iteration {int(data.get('iteration') or 0) + 1}")
        elif kind == "approval.requested":
            self._line(event, f"|| {name} waits for approval {data.get('approval_id')}")
        elif kind == "approval.resolved":
            verdict = "approved" if data.get("approved") else "rejected"
            self._line(event, f"approval {data.get('approval_id')} {verdict}")
        elif kind == "checkpoint.saved" and self._show_checkpoints:
            self._line(event, f"checkpoint {data.get('seq')}")
        elif kind == "run.suspended":
            self._write(f"run {event.run_id} suspended: {data.get('reason')}")
        elif kind == "run.completed":
            self._write(f"run {event.run_id} completed in {_ms(data.get('duration_ms'))}, "
                        f"{data.get('tokens', 0)} tokens")
        elif kind == "run.failed":
            self._write(f"run {event.run_id} failed: {data.get('error_type')}")
        elif kind == "run.cancelled":
            self._write(f"run {event.run_id} cancelled")
        elif kind == "run.superseded":
            self._write(f"run {event.run_id}: this attempt was superseded "
                        f"({data.get('reason')}); the run is {data.get('status')}")
        self._out.flush()

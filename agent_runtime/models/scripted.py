"""The scripted model: deterministic answers with no network.

`scripted/echo` answers every prompt deterministically (and, for an
`outputSchema`, with the smallest valid instance, whose JSON text is capped:
see `agent_runtime.models.smallest_instance`; past the cap the call fails
with `echo_output_too_large`). `scripted/PATH` replays the
YAML script at PATH: the n-th model request of the run gets the n-th entry of
`responses`; `byStep` entries for a step id take precedence, in order. "n-th"
is counted from the run's saved state (`ModelRequest.request_index`), so a
resumed run continues the script where its saved state left it. A request the
script has no entry for is answered as `scripted/echo` would.

Entries: `text`, `json`, `toolCalls: [{name, arguments, id?}]`, `usage:
{inputTokens, outputTokens, totalTokens}` (`usage: null` reports none),
`error: {code, message}` (the provider call fails), `delayMs` (the answer
takes that long; useful to kill a run mid-flight), `finishReason` (why the
model stopped, as a driver reports it: `length` for a truncated answer).

Set `AGENT_RUNTIME_SCRIPTED_LOG=FILE` to append one JSON line per request
answered (run, step, request index): the request count survives a killed
process, so tests can prove which requests were issued.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent_runtime.errors import ConfigError, StepFailed
from agent_runtime.limits import CONFIG_BYTES, describe_size
from agent_runtime.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    TextListener,
    ToolCallRequest,
    Usage,
)
from agent_runtime.models.smallest_instance import smallest_instance

ECHO = "echo"
REQUEST_LOG_ENV = "AGENT_RUNTIME_SCRIPTED_LOG"
_ENTRY_FIELDS = {"text", "json", "toolCalls", "usage", "error", "delayMs", "finishReason"}


@dataclass
class Script:
    responses: list[dict[str, Any]] = field(default_factory=list)
    by_step: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def entry_for(self, request: ModelRequest) -> dict[str, Any] | None:
        step_entries = self.by_step.get(request.step_id)
        if step_entries and request.step_request_index <= len(step_entries):
            return step_entries[request.step_request_index - 1]
        if request.request_index <= len(self.responses):
            return self.responses[request.request_index - 1]
        return None


def _check_entry(entry: Any, where: str, source: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ConfigError("a script entry must be a mapping", source=source, field=where)
    if set(entry) - _ENTRY_FIELDS:
        raise ConfigError(f"an entry has only the fields {', '.join(sorted(_ENTRY_FIELDS))}",
                          source=source, field=where)
    for index, call in enumerate(entry.get("toolCalls") or []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ConfigError("a tool call needs a string `name`", source=source,
                              field=f"{where}.toolCalls[{index}]")
        if not isinstance(call.get("arguments", {}), dict):
            raise ConfigError("tool call `arguments` must be a mapping", source=source,
                              field=f"{where}.toolCalls[{index}].arguments")
    return entry


def load_script(path: str | Path) -> Script:
    """The script at `path`. Errors name the file, the field and the kind of
    problem, never what the file holds: a script may be any file a host can read."""
    source = str(path)
    try:
        with open(path, "rb") as file:
            raw = file.read(CONFIG_BYTES + 1)
    except FileNotFoundError as error:
        raise ConfigError("scripted model script not found", source=source) from error
    except (OSError, ValueError) as error:
        raise ConfigError("cannot read the scripted model script", source=source) from error
    if len(raw) > CONFIG_BYTES:
        raise ConfigError(f"the script is larger than {describe_size(CONFIG_BYTES)}",
                          source=source)
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"the script is not UTF-8 text (byte {error.start})",
                          source=source) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError(f"the script is not valid YAML{where}", source=source) from None
    except RecursionError:
        raise ConfigError("the script nests too deeply", source=source) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("a script is a mapping with `responses` and/or `byStep`", source=source)
    if set(data) - {"responses", "byStep"}:
        raise ConfigError("a script has only the fields responses and byStep", source=source)
    responses = data.get("responses") or []
    by_step = data.get("byStep") or {}
    if not isinstance(responses, list):
        raise ConfigError("must be a list", source=source, field="responses")
    if not isinstance(by_step, dict):
        raise ConfigError("must be a mapping of step id to a list", source=source, field="byStep")
    for step, entries in by_step.items():
        if not isinstance(step, str) or not isinstance(entries, list | None):
            raise ConfigError("must map step ids to lists of entries", source=source,
                              field="byStep")
    return Script(
        responses=[_check_entry(entry, f"responses[{i}]", source)
                   for i, entry in enumerate(responses)],
        by_step={step: [_check_entry(entry, f"byStep[{i}]", source)
                        for i, entry in enumerate(entries or [])]
                 for step, entries in by_step.items()},
    )


def _message_text(message: dict[str, Any]) -> str:
    parts = []
    for part in message.get("content", []):
        if part.get("type") == "text":
            parts.append(part.get("text", ""))
        elif part.get("type") == "json":
            parts.append(json.dumps(part.get("value")))
    return "\n".join(parts)


def _estimate_tokens(text: str) -> int:
    # Four characters a token: deterministic, and near enough for budgets in tests.
    return max(1, math.ceil(len(text) / 4))


def echo_response(request: ModelRequest) -> ModelResponse:
    users = [m for m in request.messages if m.get("role") == "user"]
    prompt = _message_text(users[-1]) if users else ""
    input_text = "\n".join(_message_text(m) for m in request.messages)
    if request.output_schema is not None:
        data = smallest_instance(request.output_schema)
        output_text = json.dumps(data)
        return ModelResponse(text=output_text, data=data,
                             usage=_usage(input_text, output_text), model=ECHO)
    text = f"[echo] {prompt}"
    return ModelResponse(text=text, usage=_usage(input_text, text), model=ECHO)


def _usage(input_text: str, output_text: str) -> Usage:
    return Usage(input_tokens=_estimate_tokens(input_text),
                 output_tokens=_estimate_tokens(output_text))


def _scripted_response(entry: dict[str, Any], request: ModelRequest) -> ModelResponse:
    if "error" in entry:
        error = entry["error"] or {}
        raise ModelError(str(error.get("code", "scripted_error")),
                         str(error.get("message", "scripted model error")))
    calls = [
        ToolCallRequest(call_id=str(call.get("id") or f"call_{request.request_index}_{index}"),
                        name=call["name"], arguments=dict(call.get("arguments") or {}))
        for index, call in enumerate(entry.get("toolCalls") or [])
    ]
    data = entry.get("json")
    text = entry.get("text")
    if text is None and data is not None:
        text = json.dumps(data)
    if "usage" in entry:
        usage = Usage.from_json(entry["usage"])
    else:  # estimated from the request's text, read only then
        input_text = "\n".join(_message_text(m) for m in request.messages)
        usage = _usage(input_text, text or json.dumps([c.arguments for c in calls]))
    return ModelResponse(text=text, data=data, tool_calls=calls, usage=usage,
                         finish_reason=str(entry.get("finishReason")
                                           or ("tool-calls" if calls else "stop")),
                         model=request.model)


class ScriptedModel:
    """The `scripted` provider. `model` is `echo` or the path of a script."""

    def __init__(self, base_dir: Path | None = None, *,
                 may_read: Callable[[Path], bool] | None = None) -> None:
        self._base_dir = base_dir or Path.cwd()
        # Asked before a script file is opened: the host policy's scriptFiles
        # (agent_runtime.policy), so no manifest can make it read another file.
        self._may_read = may_read
        self._scripts: dict[str, Script] = {}
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def add_script(self, name: str, script: Script) -> None:
        """Serve `script` as model `name` (for tests: no file needed)."""
        with self._lock:
            self._scripts[name] = script

    def script(self, model: str) -> Script | None:
        if model == ECHO:
            return None
        with self._lock:
            if model not in self._scripts:
                path = Path(model)
                path = path if path.is_absolute() else self._base_dir / path
                if self._may_read is not None and not self._may_read(path):
                    raise StepFailed("model_not_allowed",
                                     "a scripted model's script is a file on this host; only "
                                     "scripted/echo and the host's policy.scriptFiles are "
                                     "allowed")
                self._scripts[model] = load_script(path)
            return self._scripts[model]

    async def generate(self, request: ModelRequest, *,
                       on_text: TextListener | None = None) -> ModelResponse:
        self.requests.append(request)
        _log_request(request)
        script = self.script(request.model)
        entry = None if script is None else script.entry_for(request)
        if entry is not None and entry.get("delayMs"):
            await asyncio.sleep(float(entry["delayMs"]) / 1000)
        response = echo_response(request) if entry is None else _scripted_response(entry, request)
        if on_text is not None and response.text:
            on_text(response.text)
        return response


def _log_request(request: ModelRequest) -> None:
    path = os.environ.get(REQUEST_LOG_ENV)
    if not path:
        return
    line = json.dumps({"run_id": request.run_id, "step_id": request.step_id,
                       "step_path": request.step_path, "request_index": request.request_index})
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())

"""A fake OpenAI-compatible model on 127.0.0.1 that holds its answers until the test lets
them go, and counts the requests it holds at once: how many runs a `serve` keeps
waiting on their model together is what it sees, not a time anyone measured.

    with fake_chat_model() as model:
        config = model.config_file(tmp_path)      # `--config` for serve
        ...
        model.wait_for_in_flight(200)             # 200 requests held at once
        model.release.set()                       # every held request is answered

Each request is answered `{"choices": [{"message": {"content": ANSWER}}]}` with its
usage. Requests name their run in the prompt (`run-key` variables), which the
test reads back (`prompts`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ANSWER = "fine"
HOLD_LIMIT = 180.0  # a forgotten release must not hang a test run forever
PROVIDER = "fake"
MODEL = "fake/slow"


@dataclass
class FakeChatModel:
    url: str = ""
    release: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    in_flight: int = 0
    peak: int = 0
    prompts: list[str] = field(default_factory=list)

    def config_file(self, workdir: Path, *, policy: str = "") -> Path:
        """A runtime config whose provider `fake` is this server (openai-compatible)."""
        path = workdir / "runtime.config.yaml"
        path.write_text("version: '1.0'\n"
                        "providers:\n"
                        f"  {PROVIDER}:\n"
                        "    driver: openai-compatible\n"
                        f"    baseURL: {self.url}/v1\n"
                        + policy, encoding="utf-8")
        return path

    def wait_for_in_flight(self, count: int, timeout: float = 120.0) -> bool:
        """Until `count` requests are held at once (False after `timeout` seconds)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.in_flight >= count, timeout)

    def wait_for_requests(self, count: int, timeout: float = 120.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.prompts) >= count, timeout)

    def requests_naming(self, text: str) -> int:
        with self.changed:
            return sum(text in prompt for prompt in self.prompts)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Hundreds of runs connect at once: a short accept backlog would drop their
    # SYNs and make them retry seconds later.
    request_queue_size = 1024


@contextmanager
def fake_chat_model() -> Iterator[FakeChatModel]:
    state = FakeChatModel()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            prompt = json.dumps(body.get("messages", []))
            with state.changed:
                state.prompts.append(prompt)
                state.in_flight += 1
                state.peak = max(state.peak, state.in_flight)
                state.changed.notify_all()
            try:
                state.release.wait(HOLD_LIMIT)
            finally:
                with state.changed:
                    state.in_flight -= 1
                    state.changed.notify_all()
            self._answer(_completion(body.get("model", "slow")))

        def _answer(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the caller went away (a killed serve)
                self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()
        # Held handlers answer now; give them a moment before the socket goes.
        deadline = time.monotonic() + 10.0
        while state.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        server.shutdown()
        server.server_close()


def _completion(model: str) -> dict[str, Any]:
    return {"id": "fake", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}

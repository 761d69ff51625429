"""A fake OpenAI-compatible model for bench/serve_concurrency.py, in its own process.

    python bench/fake_chat_server.py --delay 1.0
    # prints: listening on http://127.0.0.1:PORT  (then serves until killed)

`POST /v1/chat/completions` answers after `--delay` seconds, as the script of
bench/concurrency_workload.py says: a call of `lookup_item` while the request
carries fewer than TOOL_ITERATIONS tool results, then text. One asyncio loop
holds every waiting request, so thousands can wait at once; the HTTP is the
little the Chat Completions drivers and httpx speak (HTTP/1.1, Content-Length bodies,
keep-alive), on 127.0.0.1 only.

`GET /calls?prefix=P` answers, for every run tag starting with P, the wall
clock (`time.time()`) at which each of its requests arrived and its answer
was written: `{"calls": {tag: [[arrived, answered], ...]}, "unmatched": n}`.
The bench reads the runtime's own time per step from the gaps between them.
`GET /lag` answers how late this server's loop woke from 50 ms sleeps since
the last `GET /lag` (`{"p99_ms", "max_ms"}`): a late loop would delay answers
and arrivals, and charge the engine for the model's slowness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from urllib.parse import parse_qs, urlsplit

from concurrency_workload import (
    MODEL_NAME,
    TAG_PATTERN,
    TOOL_ITERATIONS,
    TOOL_NAME,
    percentile,
)

MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024
LAG_TICK = 0.05


class ChatScript:
    """The scripted answers and the log of when each run's requests came and went."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: dict[str, list[list[float]]] = {}
        self.unmatched = 0
        self.answers = 0
        self.lags: list[float] = []

    async def complete(self, raw: bytes) -> tuple[int, dict[str, object], str | None]:
        """The status and body of the answer, and the run's tag (None when refused)."""
        try:
            body = json.loads(raw)
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return 400, {"error": {"message": "the body is not a chat completion request"}}, None
        found = TAG_PATTERN.search(raw)
        if found is None:
            self.unmatched += 1
            return 400, {"error": {"message": "no bench-run tag in the conversation"}}, None
        tag = found.group().decode()
        done = sum(1 for message in messages
                   if isinstance(message, dict) and message.get("role") == "tool")
        await asyncio.sleep(self.delay)
        self.answers += 1
        if done < TOOL_ITERATIONS:
            arguments = json.dumps({"item": f"{tag}/item-{done + 1}"})
            message: dict[str, object] = {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": f"call-{self.answers}", "type": "function",
                                "function": {"name": TOOL_NAME, "arguments": arguments}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": f"Looked up {done} items of {tag}."}
            finish = "stop"
        return 200, {"id": f"chatcmpl-{self.answers}", "object": "chat.completion",
                     "created": int(time.time()), "model": MODEL_NAME,
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                     "usage": {"prompt_tokens": 40, "completion_tokens": 12,
                               "total_tokens": 52}}, tag

    def record(self, tag: str, arrived: float, answered: float) -> None:
        self.calls.setdefault(tag, []).append([arrived, answered])

    def calls_of(self, query: str) -> dict[str, object]:
        prefix = parse_qs(query).get("prefix", [""])[0]
        return {"calls": {tag: times for tag, times in self.calls.items()
                          if tag.startswith(prefix)},
                "unmatched": self.unmatched}

    def lag(self) -> dict[str, object]:
        """How late the loop woke, since the last call; then forget it."""
        lags, self.lags = self.lags, []
        if not lags:
            return {"p99_ms": None, "max_ms": None}
        return {"p99_ms": percentile(lags, 0.99) * 1000, "max_ms": max(lags) * 1000}

    async def watch_lag(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            self.lags.append(max(0.0, time.monotonic() - before - LAG_TICK))


async def _answer(writer: asyncio.StreamWriter, status: int, body: dict[str, object],
                  *, close: bool) -> None:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Too Large"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n")
    writer.write(head.encode() + payload)
    await writer.drain()


async def serve_connection(script: ChatScript, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = [*lines[0].split(" "), "", ""][:3]
            headers = {name.strip().lower(): value.strip() for name, _, value in
                       (line.partition(":") for line in lines[1:] if line)}
            close = headers.get("connection", "").lower() == "close"
            length = int(headers.get("content-length", "0") or "0")
            if length > MAX_BODY:
                await _answer(writer, 413, {"error": {"message": "body too large"}}, close=True)
                return
            raw = await reader.readexactly(length) if length else b""
            arrived = time.time()
            url = urlsplit(target)
            tag = None
            if method == "POST" and url.path.endswith("/chat/completions"):
                status, body, tag = await script.complete(raw)
            elif method == "GET" and url.path == "/calls":
                status, body = 200, script.calls_of(url.query)
            elif method == "GET" and url.path == "/lag":
                status, body = 200, script.lag()
            else:
                status, body = 404, {"error": {"message": f"no route {method} {url.path}"}}
            await _answer(writer, status, body, close=close)
            if tag is not None:
                script.record(tag, arrived, time.time())
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def main_async(delay: float) -> None:
    script = ChatScript(delay)
    server = await asyncio.start_server(
        lambda reader, writer: serve_connection(script, reader, writer),
        host="127.0.0.1", port=0, limit=MAX_HEAD, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    watcher = asyncio.create_task(script.watch_lag())
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        watcher.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0,
                        help="seconds before each answer (default: 1)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async(args.delay))


if __name__ == "__main__":
    main()

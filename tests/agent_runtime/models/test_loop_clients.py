"""Model calls that overlap on one event loop share a client and its connections;
loops never share one; a client no call uses lingers for the next call, then is
closed, and is closed when its loop ends (agent_runtime/models/loop_clients.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from chat_completions_wire import completion

from agent_runtime.config import parse_config
from agent_runtime.models import openai as openai_driver
from agent_runtime.models.base import ModelRequest
from agent_runtime.models.loop_clients import LoopClients


class Client:
    def __init__(self, opened: list[Client]) -> None:
        self.closed = 0
        opened.append(self)

    async def close(self) -> None:
        self.closed += 1


def test_calls_that_overlap_share_one_client_which_a_later_call_reuses_until_the_loop_ends(
        ) -> None:
    opened: list[Client] = []
    clients = LoopClients(lambda: Client(opened))

    async def main() -> list[Client]:
        release = asyncio.Event()
        seen: list[Client] = []

        async def call() -> None:
            async with clients.lease() as client:
                seen.append(client)
                await release.wait()

        calls = [asyncio.create_task(call()) for _ in range(5)]
        while len(seen) < 5:
            await asyncio.sleep(0)
        assert clients.open_clients == 1
        release.set()
        await asyncio.gather(*calls)
        assert clients.open_clients == 1  # lingering for the next call
        async with clients.lease() as later:  # after the last call ended: the same client
            seen.append(later)
        assert opened[0].closed == 0
        return seen

    seen = asyncio.run(main())
    assert seen == [opened[0]] * 6 and len(opened) == 1
    # asyncio.run cancelled the wait of the idle client: it was closed with the loop.
    assert opened[0].closed == 1
    assert clients.open_clients == 0


def test_a_client_no_call_uses_is_closed_after_the_linger_and_the_next_call_opens_another(
        ) -> None:
    opened: list[Client] = []
    clients = LoopClients(lambda: Client(opened), linger_seconds=0.0)

    async def main() -> None:
        async with clients.lease():
            pass
        for _ in range(10_000):  # a bound on loop turns, not on time
            if opened[0].closed:
                break
            await asyncio.sleep(0)
        assert opened[0].closed == 1
        assert clients.open_clients == 0
        async with clients.lease() as later:
            assert later is opened[1]

    asyncio.run(main())
    assert [client.closed for client in opened] == [1, 1]


def test_a_client_takes_at_most_its_calls_at_once_and_more_calls_open_more_clients() -> None:
    opened: list[Client] = []
    clients = LoopClients(lambda: Client(opened), calls_per_client=3)

    async def main() -> list[Client]:
        release = asyncio.Event()
        seen: list[Client] = []

        async def call() -> None:
            async with clients.lease() as client:
                seen.append(client)
                await release.wait()

        calls = [asyncio.create_task(call()) for _ in range(7)]
        while len(seen) < 7:
            await asyncio.sleep(0)
        assert clients.open_clients == 3
        release.set()
        await asyncio.gather(*calls)
        return seen

    seen = asyncio.run(main())
    assert seen == [opened[0]] * 3 + [opened[1]] * 3 + [opened[2]]
    assert [client.closed for client in opened] == [1, 1, 1]
    assert clients.open_clients == 0


def test_a_call_that_fails_still_gives_its_client_back() -> None:
    opened: list[Client] = []
    clients = LoopClients(lambda: Client(opened))

    async def failing() -> None:
        async with clients.lease():
            raise RuntimeError("the provider went away")

    with pytest.raises(RuntimeError):
        asyncio.run(failing())
    assert clients.open_clients == 0
    assert opened[0].closed == 1


def test_loops_of_different_threads_never_share_a_client() -> None:
    opened: list[Client] = []
    clients = LoopClients(lambda: Client(opened))
    inside = threading.Barrier(2)
    used: list[Client] = []

    async def call() -> None:
        async with clients.lease() as client:
            used.append(client)
            await asyncio.to_thread(inside.wait)  # both loops hold a lease at once

    threads = [threading.Thread(target=asyncio.run, args=(call(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 2 and used[0] is not used[1]
    assert [client.closed for client in opened] == [1, 1]


class KeepAliveServer:
    """Chat Completions over HTTP/1.1 keep-alive on 127.0.0.1, counting connections.
    A request whose body says `hold` is answered only once `release` is called."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._released = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                asked = await reader.readexactly(length)
                self.requests += 1
                if b"hold" in asked:
                    await self._released.wait()
                body = json.dumps(completion("answered")).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def release(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._released.set)

    def __enter__(self) -> KeepAliveServer:
        self._thread.start()
        assert self._ready.wait(timeout=60)
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)


def _request(text: str) -> ModelRequest:
    return ModelRequest(provider="local", model="test-model", messages=[
        {"role": "user", "content": [{"type": "text", "text": text}]}])


def test_the_openai_driver_reuses_connections_while_calls_overlap() -> None:
    with KeepAliveServer() as server:
        local = {"driver": "openai-compatible", "baseURL": f"http://127.0.0.1:{server.port}/v1"}
        config = parse_config({"version": "1.0", "providers": {"local": local}}, source="test")
        adapter = openai_driver.create_adapter("local", config)

        async def calls() -> list[str | None]:
            held = asyncio.create_task(adapter.generate(_request("hold")))
            while server.requests < 1:  # the held call is in flight, its client open
                assert not held.done(), held.result()
                await asyncio.sleep(0.01)
            texts = [(await adapter.generate(_request("quick"))).text for _ in range(10)]
            assert adapter._clients.open_clients == 1
            server.release()
            texts.append((await held).text)
            return texts

        texts = asyncio.run(calls())
    assert texts == ["answered"] * 11
    # The held call's connection, and one the ten others took in turn: a client
    # per call would have opened eleven.
    assert server.connections == 2
    assert adapter._clients.open_clients == 0

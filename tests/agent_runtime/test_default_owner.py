"""A local engine's lease owner (`owner_liveness.default_owner`): `host:pid`, named once
per process, so a forked child names one of its own."""

from __future__ import annotations

import os
import socket

from agent_runtime.owner_liveness import default_owner


def test_the_owner_is_this_host_and_process() -> None:
    assert default_owner() == f"{socket.gethostname()}:{os.getpid()}"
    assert default_owner() is default_owner()  # named once


def test_a_forked_child_names_an_owner_of_its_own() -> None:
    parent = default_owner()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report its owner and leave at once
        os.write(write, default_owner().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read, "rb") as answer:
        named = answer.read().decode()
    assert named == f"{socket.gethostname()}:{child}"
    assert named != parent

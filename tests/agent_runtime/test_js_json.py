"""`js_json` writes the bytes JavaScript's JSON.stringify writes: a webhook receiver that
signs or hashes the body sees what the reference implementation sends."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from typing import Any

import pytest

from agent_runtime.js_json import js_json

# Written by node 20's JSON.stringify.
KNOWN = [
    (1.0, "1"), (-0.0, "0"), (1e16, "10000000000000000"), (1e21, "1e+21"),
    (1e20, "100000000000000000000"), (123456789012345678901234, "1.2345678901234569e+23"),
    (2**53 + 1, "9007199254740992"), (-(2**60), "-1152921504606847000"), (1e-7, "1e-7"),
    (1e-6, "0.000001"), (1.234e-6, "0.000001234"), (1.5e-10, "1.5e-10"),
    (float("nan"), "null"), (float("inf"), "null"),
    ({"b": 1, "2": 2, "1": 3, "01": 4, "4294967294": 5, "4294967295": 6},
     '{"1":3,"2":2,"4294967294":5,"b":1,"01":4,"4294967295":6}'),
    (["é 漢 😀", "q\"b\\n\n\x01\x7f\u2028"], '["é 漢 😀","q\\"b\\\\n\\n\\u0001\x7f\u2028"]'),
    ({"a": [1, 2.0, None, True, False]}, '{"a":[1,2,null,true,false]}'),
]


@pytest.mark.parametrize(("value", "written"), KNOWN)
def test_values_are_written_as_json_stringify_writes_them(value: Any, written: str) -> None:
    assert js_json(value) == written


def corpus(seed: int) -> list[Any]:
    draw = random.Random(seed)
    numbers: list[Any] = [draw.uniform(-1, 1) * 10 ** draw.randint(-30, 30) for _ in range(300)]
    numbers += [float(draw.randint(-10**22, 10**22)) for _ in range(100)]
    numbers += [draw.randint(-2**64, 2**64) for _ in range(100)]
    numbers += [draw.randint(-1000, 1000) / 8 for _ in range(100)]
    keys = [str(draw.randint(0, 2**33)) for _ in range(20)] + ["x", "01", "-1", "1.5", "é"]
    objects = [{draw.choice(keys): number for number in numbers[index:index + 5]}
               for index in range(0, 600, 5)]
    return [*numbers, *objects]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed here")
def test_a_random_corpus_matches_node() -> None:
    values = corpus(2026)
    script = ("const vs = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify(vs.map((v) => JSON.stringify(v))))")
    # Python's json.dumps text of a double reads back as the same double in node.
    written = json.loads(subprocess.run(["node", "-e", script], input=json.dumps(values),
                                        capture_output=True, text=True, check=True,
                                        timeout=120).stdout)
    assert [js_json(value) for value in values] == written

"""The workload of bench/serve_concurrency.py, shared by every engine it drives.

A run is one conversation with the fake model of bench/fake_chat_server.py:
its first `TOOL_ITERATIONS` answers each ask for one call of `lookup_item`,
the next one answers text. The model tells runs apart by the tag in the
prompt (`bench-run-...`), so it keeps no state between requests: how many tool
results a request carries says which answer is due.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

TOOL_ITERATIONS = 5
TOOL_NAME = "lookup_item"
MODEL_NAME = "bench-model"
# A tag is `bench-run-<engine>-<number>`; it never contains a quote, so it can
# be found in a request's raw JSON bytes.
TAG_PATTERN = re.compile(rb"bench-run-[a-z]+-[0-9]+")
SYSTEM_PROMPT = "You look up items with the lookup_item tool, then summarise them."


def run_tag(engine: str, index: int) -> str:
    return f"bench-run-{engine}-{index:06d}"


PROMPT = "Look up the items of {tag}, one at a time, then summarise them."


def prompt_for(tag: str) -> str:
    return PROMPT.format(tag=tag)


def lookup_item(item: str) -> dict[str, object]:
    """Look up one item of a bench run.

    Args:
        item: The item's name, as the model gave it.
    """
    # Cheap on purpose: the bench measures the engines, not the tool.
    return {"item": item, "found": True, "length": len(item)}


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (`fraction` 0.5 is the median); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]

"""An operator's search of runs (`RunStore.list_runs(agent=, run_id_prefix=,
created_after=, created_before=)`): what each filter means, once, for every store.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from stores.records import RunRecord, agent_of


class RunSearch(NamedTuple):
    """The search filters of a listing, as one value a store passes on; each is None
    when not given, and all that are given hold (AND)."""

    agent: str | None = None
    run_id_prefix: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def matches(self, run: RunRecord) -> bool:
        """Whether `run` is one the search finds: of the agent (`records.agent_of`),
        its id starting with the prefix, created in [after, before)."""
        if self.agent is not None and agent_of(run.manifest) != self.agent:
            return False
        if self.run_id_prefix is not None and not run.run_id.startswith(self.run_id_prefix):
            return False
        if self.created_after is not None and run.created_at < self.created_after:
            return False
        return self.created_before is None or run.created_at < self.created_before


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None when there
    is none): `prefix <= id < prefix_end(prefix)` is `id.startswith(prefix)`, a range a
    store's sorted index answers. Code points order as UTF-8 bytes do, so the range
    holds in SQLite's and DynamoDB's byte order too."""
    for end in range(len(prefix), 0, -1):
        code = ord(prefix[end - 1]) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates are no text: skip to the next character
            code = 0xE000
        if code <= 0x10FFFF:
            return prefix[:end - 1] + chr(code)
    return None

"""How often the cycle collector runs in `serve`, a process holding many runs at once.

Python's cycle collector starts a young collection after every 700 more
container objects (dicts, lists, coroutines...) allocated than freed; every
tenth young collection walks the middle generation too, and every tenth of
those considers a full collection, made once the objects promoted since the
last one reach a quarter of the old generation. A run waiting on its model
holds about 400 such objects (its state, its coroutines and the model call's
connection), so with 1,000 runs waiting in one `serve` every collection finds
much still alive: the young ones promote it, the middle ones walk it again,
and the full ones walk all 400,000 objects (0.2 to 0.5 s each, every run
stalled meanwhile). Measured with the concurrency bench (1,000 runs, a model
answering in 1 s, one `serve --pin-cpus`): the collector took 4.4 s of
`serve`'s 21.5 s of CPU, 11 of them full collections.

Collecting the young generation every 10,000 allocations instead lets most of
a step's objects die of reference counting before any collection sees them:
the collector's share fell to 1.5 s of 17.7 s (one full collection), and the
bench completed 59-61 runs a second against 46-51 at the default (two
alternated pairs; 5,000 and 25,000 measured no better). Reference cycles are
still collected, a little later: a young collection walks about 10,000
objects (about 12 ms here), and the older generations keep their defaults.
"""

from __future__ import annotations

import gc

# Net container allocations between two young collections (Python's default: 700).
YOUNG_COLLECTION_EVERY = 10_000


def pace_for_many_runs() -> None:
    """Collect the young generation every `YOUNG_COLLECTION_EVERY` allocations; the
    older generations keep their thresholds."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


__all__ = ["YOUNG_COLLECTION_EVERY", "pace_for_many_runs"]

"""What a process builds while it starts, kept out of the cycle collector's walks.

Starting a process that hosts runs (the CLI's `run`, `resume`, `fork`,
`reconcile` and `serve`, each Lambda handler) imports hundreds of modules and
builds their classes, pydantic validators and schemas: several hundred
thousand objects that live as long as the process. Python's cycle collector
walks every object of the oldest generation at each full collection, so a
run's first full collection (measured: 20 to 40 ms, a fifth of a
1,000-iteration loop's whole engine time) and every one after it on a long
`serve` pays for that startup heap again, though none of it can ever be freed.

`freeze_startup_heap` moves every object alive now into the collector's
permanent generation (`gc.freeze`): never walked again. Reference counting
still frees any of them whose last reference goes; only a cycle among them
that becomes garbage later stays in memory, which a startup heap does not
make. Called once a process has started, by the process's own entry point:
never by library code, which cannot know whether its caller's objects will
live.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Leave every object alive now out of the cycle collector's future walks."""
    gc.freeze()

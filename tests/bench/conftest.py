"""The bench's modules import each other as the scripts they are (`python
bench/serve_concurrency.py` puts bench/ first on the path), so their tests do too."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

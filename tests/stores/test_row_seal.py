"""A SQLite row's seal (`row_digest`) is the sha256 of its columns' JSON list, and stays
the same text from release to release: a seal a store wrote must verify when read."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from stores.sqlite_rows import row_digest

# What a column can hold: SQLite's types as sqlite3 hands them over, and the
# Python values the store seals (booleans among the ints, text of any kind).
_COLUMN = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(),
    st.text(alphabet=st.characters(codec=None, categories=("Cs", "Cc", "Lo"))),
    st.binary(max_size=8))


def _stdlib_seal(values: tuple[object, ...]) -> str:
    """The seal as `json.dumps` writes the list: what every store has stored."""
    text = json.dumps(values, separators=(",", ":"),
                      default=lambda value: f"<{type(value).__name__}>{value!r}")
    return hashlib.sha256(text.encode()).hexdigest()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.lists(_COLUMN, max_size=16))
def test_a_seal_is_the_sha256_of_the_columns_json_list(kind: str,
                                                      columns: list[object]) -> None:
    assert row_digest(kind, *columns) == _stdlib_seal((kind, *columns))


def test_seals_written_by_earlier_releases_still_verify() -> None:
    # Computed by the release before the seal's encoder was built once (87beec0).
    assert row_digest("checkpoint", "run-0001", 3, 1, 1733470000000000, None, 42, 2345,
                      "ab" * 32) == \
        "6a6c7f911f19608b2b18bac24abb3b1c50616b7aedb7848e14e8a7b56bd56544"
    assert row_digest("run", "run-é", 1.5, float("nan"), b"\x00", True, "\ud800") == \
        "d9cc980d24681786d6776471684a86070a459e51ea5779efa16660b3de4731ea"

"""schemathesis hooks (`SCHEMATHESIS_HOOKS=<this file>`): lone surrogates in generated bodies.

schemathesis generates only strings that UTF-8 can encode, so it never sends
`"\\ud800"`: valid JSON syntax, yet not Unicode text, and once a 500 with a
serialization traceback (an approval's `response` reached the store). This
hook gives about half of the generated JSON bodies one lone surrogate (U+D800
to U+DFFF) inside a string value or an object key, anywhere in the body;
`json.dumps` sends it as its `\\udXXX` escape. A body is the only place a
client can put one: a URL or a header is bytes, and bytes that decode to a
surrogate are not UTF-8 (`test_serve_unicode` sends those).
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import strategies as st

Path = tuple[str | int, ...]

SURROGATES = st.integers(min_value=0xD800, max_value=0xDFFF).map(chr)


def string_places(value: Any, path: Path = ()) -> list[tuple[Path, bool]]:
    """Every string in `value`, as (path, is_key): values by their path, keys by
    the path of the object holding them plus the key."""
    found: list[tuple[Path, bool]] = []
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            found.append((at, False))
        elif isinstance(item, dict):
            for key, child in item.items():
                found.append(((*at, key), True))
                stack.append((child, (*at, key)))
        elif isinstance(item, list):
            stack.extend((child, (*at, index)) for index, child in enumerate(item))
    return found


def with_surrogate(value: Any, place: tuple[Path, bool], surrogate: str, where: int) -> Any:
    """A copy of `value` with `surrogate` put into the string at `place`."""
    path, is_key = place
    if not path:
        return value[:where] + surrogate + value[where:] if isinstance(value, str) else value
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        assert isinstance(head, int)
        return [with_surrogate(item, (rest, is_key), surrogate, where) if index == head else item
                for index, item in enumerate(value)]
    assert isinstance(value, dict) and isinstance(head, str)
    if is_key and not rest:  # this object's key `head`
        cut = min(where, len(head))
        renamed = head[:cut] + surrogate + head[cut:]
        return {(renamed if key == head else key): item for key, item in value.items()}
    return {key: with_surrogate(item, (rest, is_key), surrogate, where) if key == head else item
            for key, item in value.items()}


@schemathesis.hook
def flatmap_body(context: Any, body: Any) -> Any:
    places = string_places(body) if isinstance(body, dict | list) else []
    if not places:
        return st.just(body)
    altered = st.builds(lambda place, surrogate, where: with_surrogate(body, place, surrogate,
                                                                      where),
                        st.sampled_from(places), SURROGATES, st.integers(0, 64))
    return st.one_of(st.just(body), altered)

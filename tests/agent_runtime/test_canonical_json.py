"""The one canonical JSON form: what the manifest hash and the API's request
fingerprint are computed over (docs/design.md section 3: keys sorted, no insignificant
whitespace, UTF-8)."""

from __future__ import annotations

import hashlib
import math

import pytest

from agent_runtime.api.submission import request_fingerprint
from agent_runtime.manifest import manifest_hash, manifest_json, parse_agent_manifest
from agent_runtime.serde import canonical_json


def test_keys_are_sorted_at_every_depth_with_no_whitespace_and_text_kept() -> None:
    assert canonical_json({"b": [1, {"z": 1, "a": "é"}], "a": None}) == \
        '{"a":null,"b":[1,{"a":"é","z":1}]}'


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_number_json_cannot_carry_has_no_canonical_form(number: float) -> None:
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": number})


def test_the_manifest_hash_and_the_request_fingerprint_hash_the_canonical_form() -> None:
    manifest = parse_agent_manifest({"schemaVersion": "1.0", "id": "ünï",
                                     "steps": [{"id": "a", "type": "prompt", "prompt": "hi"}]},
                                    source="inline")
    text = canonical_json(manifest_json(manifest))
    assert manifest_hash(manifest) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    body = {"manifest": {"id": "x"}, "variables": {"b": 2, "a": 1}}
    assert request_fingerprint(body) == hashlib.sha256(
        b'{"manifest":{"id":"x"},"variables":{"a":1,"b":2}}').hexdigest()

"""Request bodies as Go's encoding/json writes them (raw-extension fields go back byte for byte)."""

from __future__ import annotations

import json

import pytest

from operators.core.api import wirejson


def test_compact_in_the_order_read_with_gos_escapes_and_utf8():
    # What kube-apiserver answers for a raw field kubectl wrote (compact, HTML characters escaped).
    stored = '{"kind":"Config","note":"\\u003cx \\u0026 y\\u003e","owner":"équipe","n":[1,2.5,{"z":null,"a":true}]}'
    assert wirejson.dumps(json.loads(stored)) == stored.encode()


def test_line_separators_are_escaped_as_go_does():
    assert wirejson.dumps({"s": "a\u2028b\u2029c\n"}) == b'{"s":"a\\u2028b\\u2029c\\n"}'


def test_not_a_number_is_refused_as_go_refuses_it():
    with pytest.raises(ValueError):
        wirejson.dumps({"x": float("nan")})

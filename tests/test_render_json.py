"""render/json.py: the one writer of every JSON document on stdout."""
import json

from ddpdoctor.render import json as rj


def test_an_error_document_has_the_shape_every_command_shares():
    assert json.loads(rj.error("prolog", 2, "usage", "bad option")) == {
        "schema": 1, "command": "prolog", "exit_code": 2, "error": {"kind": "usage", "message": "bad option"}}


def test_a_document_is_strict_json_and_keeps_the_layout():
    doc = rj.document({"a": (1, 2), "t": float("nan"), "inf": float("inf")})
    assert json.loads(doc) == {"a": [1, 2], "t": None, "inf": None}
    assert doc.startswith('{\n  "a": [\n')  # indent=2, as the commands printed it before
    assert rj.document({"x": 1}, indent=None) == '{"x": 1}'

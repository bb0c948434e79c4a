"""The JSON Schemas in docs/schema compile as published under Python
jsonschema (each by its $id, nothing fetched), and the conformance vectors'
valid messages satisfy them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = sorted((REPO / "docs" / "schema").glob("*.schema.json"))
BASE = "https://github.com/interlockhq/interlock/docs/schema/"


def registry() -> Registry[Any]:
    resources = []
    for f in SCHEMAS:
        doc = json.loads(f.read_text())
        assert doc.get("$id") == BASE + f.name, f"{f.name}: $id must be {BASE + f.name}"
        resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)  # no retrieve: nothing is fetched


def validator(name: str) -> jsonschema.Draft202012Validator:
    reg = registry()
    schema = reg.contents(BASE + name + ".schema.json")
    return jsonschema.Draft202012Validator(schema, registry=reg, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_schema_compiles(path: Path) -> None:
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    resolver = registry().resolver(base_uri=schema["$id"])
    refs = _refs(schema)
    for ref in refs:  # every $ref resolves, relative to the file's $id
        assert resolver.lookup(ref).contents is not None, ref


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for v in node.values():
            out += _refs(v)
        return out
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


CASES = json.loads((REPO / "testdata" / "conformance" / "messages.json").read_text())["cases"]
VALID = [c for c in CASES if c["code"] is None and "message" in c and "without version" not in c["name"]]


@pytest.mark.parametrize("case", VALID, ids=lambda c: f"{c['kind']}: {c['name']}")
def test_valid_messages_match_schemas(case: dict[str, Any]) -> None:
    validator(case["kind"]).validate(case["message"])


def test_schema_refuses_null_payload() -> None:
    msg = {"version": 1, "decisionId": "d", "interruptId": "i", "status": "resolved", "payload": None}
    with pytest.raises(jsonschema.ValidationError):
        validator("decision").validate(msg)

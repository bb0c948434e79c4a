"""The call digest of protocol version 2: SHA-256 of the RFC 8785 (JCS)
canonical JSON of ``{"arguments": <arguments>, "tool": <tool>}``, as the Go
``subjects.CallDigest`` computes it (checked by the shared conformance
vectors, ``policies.json``)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ._errors import ProtocolError

MAX_DEPTH = 64
"""Arguments nested deeper than this have no digest (Go: maxJCSDepth)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class _Raw:
    """Arguments given as JSON text rather than as a value."""

    def __init__(self, text: str | bytes) -> None:
        self.text = text


def raw_json(text: str | bytes) -> Any:
    """Mark ``text`` as JSON text, for :func:`call_digest` and
    :func:`canonicalize` to parse (refusing repeated member names) instead of
    reading it as a string value."""
    return _Raw(text)


def _malformed(detail: str) -> ProtocolError:
    return ProtocolError("malformed", detail)


def _refuse_constant(name: str) -> Any:
    raise _malformed(f"arguments are not JSON: {name}")


def distinct(pairs: list[tuple[str, Any]], repeated: Callable[[str], str]) -> dict[str, Any]:
    """An object of pairs whose keys are all distinct; a key twice is
    ``malformed``, in the words ``repeated`` gives it (a json.loads
    object_pairs_hook)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _malformed(repeated(k))
        out[k] = v
    return out


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return distinct(pairs, lambda k: f"arguments repeat the member name {k!r}")


def _parse(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise _malformed("arguments are not valid UTF-8") from None
    if text.strip() == "":
        return {}
    try:
        # Numbers stay text here: each is read as a double when written.
        return json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_float=Decimal,
            parse_int=Decimal,
            parse_constant=_refuse_constant,
        )
    except RecursionError:
        raise _malformed(f"arguments are nested deeper than {MAX_DEPTH}") from None
    except ValueError as e:
        if isinstance(e, ProtocolError):
            raise
        raise _malformed(f"arguments are not JSON: {e}") from None


def number(f: float) -> str:
    """``f`` as ECMAScript's Number.prototype.toString prints it (RFC 8785,
    section 3.2.2.3)."""
    if math.isinf(f) or math.isnan(f):
        raise _malformed(f"number {f} is out of the range of an IEEE 754 double")
    if f == 0:
        return "0"  # -0 too
    neg = f < 0
    # repr gives the shortest digits that read back as f.
    _, digits_t, exp = Decimal(repr(abs(f))).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_t)
    assert isinstance(exp, int)
    k = len(digits)
    n = exp + k  # the decimal point sits after n digits
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        x = n - 1
        out = digits[:1] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if x >= 0 else "-") + str(abs(x))
    return "-" + out if neg else out


def _double(v: Any) -> float:
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if math.isinf(f) or math.isnan(f):
        raise _malformed(f"number {v} is out of the range of an IEEE 754 double")
    return f


def _string(s: str) -> str:
    # Python's JSON escapes exactly what RFC 8785 does (", \, \b \f \n \r
    # \t, other controls as \u00xx) when it may keep non-ASCII as is. A lone
    # surrogate becomes U+FFFD, as Go's decoder makes it.
    return json.dumps(_SURROGATE.sub("\ufffd", s), ensure_ascii=False)


def _write(out: list[str], v: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _malformed(f"arguments are nested deeper than {MAX_DEPTH}")
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_string(v))
    elif isinstance(v, int | float | Decimal):
        out.append(number(_double(v)))
    elif isinstance(v, list | tuple):
        out.append("[")
        for i, e in enumerate(v):
            if i:
                out.append(",")
            _write(out, e, depth + 1)
        out.append("]")
    elif isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise _malformed(f"argument member name {k!r} is not a string")
        keys = sorted(v, key=lambda k: _SURROGATE.sub("\ufffd", k).encode("utf-16-be"))
        out.append("{")
        for i, k in enumerate(keys):
            if i:
                out.append(",")
            out.append(_string(k))
            out.append(":")
            _write(out, v[k], depth + 1)
        out.append("}")
    else:
        raise _malformed(f"arguments hold {type(v).__name__}, which is not a JSON value")


def canonicalize(arguments: Any) -> str:
    """The RFC 8785 canonical JSON of ``arguments``: a JSON value (dicts,
    lists, strings, numbers, booleans, None) or JSON text wrapped in
    :func:`raw_json`. Raises :class:`ProtocolError` (``malformed``) for a
    value with no canonical form: a repeated member name, a number out of
    a double's range, NaN, nesting deeper than 64, or not JSON."""
    value = _parse(arguments.text) if isinstance(arguments, _Raw) else arguments
    out: list[str] = []
    _write(out, value, 0)
    return "".join(out)


def call_digest(tool: str, arguments: Any = None) -> str:
    """The call digest of calling ``tool`` with ``arguments``: 64 lowercase
    hex digits of SHA-256 of the canonical JSON of ``{"arguments":
    arguments, "tool": tool}``. Arguments None (left out) are ``{}``; give
    JSON text as :func:`raw_json`. Two calls have the same digest exactly
    when they name the same tool with the same arguments as JSON values (key
    order, spacing, escapes and number spelling aside). Raises
    :class:`ProtocolError` (``malformed``) when the arguments have no
    canonical form (see :func:`canonicalize`)."""
    if not isinstance(tool, str):
        raise TypeError("tool must be a string")
    args = canonicalize({} if arguments is None else arguments)
    text = '{"arguments":' + args + ',"tool":' + _string(tool) + "}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

"""The line around a hit, read from the block's bytes: where a line ends, whether the next one continues it (a
message wrapped in two), the two joined as a person reads them, the lines under it. Split from matcher.py."""
from __future__ import annotations

import re

from ddpdoctor.logscan.origin import split_origin

MAX_TEXT = 2000     # characters of a line kept as evidence and searched by the regexes


def _line_end(low: bytes, pos: int, n: int) -> int:
    nl = low.find(b"\n", pos)
    if nl == -1:
        nl = n
    cr = low.find(b"\r", pos, nl)
    return nl if cr == -1 else cr


# a wrapped message goes on mid-sentence: in lowercase, or mid-number (a terminal cuts `NumelOut=1|29280`), or with
# the quote that opens its quoted part (`'peer access is not supported ...'`)
_CONTINUES = re.compile(rb"[ \t]*['\"`]?[a-z0-9(]")


def _two_lines(data: bytes, low: bytes, start: int, end: int) -> bytes:
    """The lowercased line at start:end and the next one joined by a space, when the next line reads as the
    rest of this one (it goes on in lowercase, as a terminal or a poster wraps a sentence); else b""."""
    if end >= len(low) - 1 or not _CONTINUES.match(data, end + 1):
        return b""
    nxt_end = low.find(b"\n", end + 1)
    nxt = low[end + 1:nxt_end if nxt_end != -1 else len(low)][:MAX_TEXT].strip()
    return low[start:end].rstrip() + b" " + nxt if nxt else b""


def _joined(data: bytes, end: int, body: str) -> str:
    """`body` and the line after it as one line (the next line's prefixes and indent dropped), or "" when
    there is no next line in this block or it is empty: how a person reads a message wrapped in two."""
    if end >= len(data):
        return ""
    nxt_end = data.find(b"\n", end + 1)
    nxt = data[end + 1:nxt_end if nxt_end != -1 else len(data)][:MAX_TEXT]
    if not nxt.strip():
        return ""
    text = split_origin(nxt.decode("utf-8", "replace").strip("\r\n"))[0].strip()
    return f"{body.rstrip()} {text}" if text else ""


def _following(data: bytes, end: int, n: int, width: int = 300) -> str:
    """The `n` lines after the line ending at `end` (in this block), each cut to `width` characters."""
    if n == 1:   # a traceback frame's source line: every frame line asks
        pos = end + 1
        if pos >= len(data):
            return ""
        nl = data.find(b"\n", pos, pos + width)
        return data[pos:nl if nl != -1 else pos + width].decode("utf-8", "replace").strip("\r")
    out = []
    pos = end + 1
    while len(out) < n and pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl == -1 else nl
        out.append(data[pos:min(nl, pos + width)].decode("utf-8", "replace").strip("\r"))
        pos = nl + 1
    return "\n".join(out)

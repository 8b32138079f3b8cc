"""Read a log as users have it, in blocks of whole lines, in constant memory.

Handles: any size (blocks of CHUNK bytes; a line longer than a block is passed on in pieces, so a
1 GB line costs no more memory than a short one), gzip, UTF-16 with a BOM (what PowerShell's `>`
writes), ANSI colour codes, CRLF, NUL bytes and invalid UTF-8 (decoded with replacement only on
the few lines that match), and a forum's typesetting of a pasted log (curly quotes, dashes, `…`, no-break spaces). Line numbers count '\\n' like editors and `grep -n` do.
"""
from __future__ import annotations

import codecs
import gzip
import io
import re
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from ddpdoctor.logscan.gatefind import FIND, _bytes_find, literal_finder

CHUNK = 4 << 20

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and two-byte escapes.
# Never across a newline, so stripping keeps the line count.
ANSI_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


class CorruptInput(ValueError):
    """The stream cannot be read to its end (a truncated or corrupt .gz): every block before the
    damage was already yielded; `lines` is how many whole lines that was."""

    def __init__(self, msg: str, lines: int):
        super().__init__(msg)
        self.lines = lines


@dataclass
class Block:
    data: bytes        # whole lines (ends with b"\n"), or a piece of an overlong line
    first_line: int    # 1-based number of the line `data` starts in
    continues: bool    # the last line of `data` goes on in the next block
    size: int = 0      # bytes read for this block (before colour codes were removed)
    newlines: int = 0  # line ends in `data`


def open_source(path: str, stdin: BinaryIO | None = None) -> BinaryIO:
    """A binary stream for `path` ('-' is stdin). Raises OSError as the OS reports it."""
    if path == "-":
        import sys

        return stdin if stdin is not None else sys.stdin.buffer
    return open(path, "rb")


class _GzipGuard(io.RawIOBase):
    """A gzip stream that ends, instead of raising, where the data is truncated or corrupt, and
    keeps what it could decompress before that (GzipFile.read(n) would drop a whole n bytes).
    `error` says what stopped it."""

    def __init__(self, gz: gzip.GzipFile):
        self._gz = gz
        self.error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.error is not None:
            return 0
        try:
            data = self._gz.read1(min(len(b), 1 << 16))
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            self.error = e
            return 0
        b[:len(data)] = data
        return len(data)


MAX_GZIP_LAYERS = 3  # a log gzipped twice happens (a .gz inside a .tar.gz); 150 layers is an attack


def _sniff(stream: BinaryIO, guards: list | None = None, depth: int = 0) -> BinaryIO:
    """Wrap gzip and UTF-16 streams so the rest only ever sees UTF-8-ish bytes."""
    head = _peek(stream, 4)
    if head[:2] == b"\x1f\x8b" and depth < MAX_GZIP_LAYERS:
        # each layer holds a CHUNK buffer: the depth bound keeps memory bounded (the rest is read as bytes)
        guard = _GzipGuard(gzip.GzipFile(fileobj=stream))
        if guards is not None:
            guards.append(guard)
        return _sniff(io.BufferedReader(guard, CHUNK), guards, depth + 1)
    if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return _Transcoder(stream, "utf-16")
    return stream


def _peek(stream: BinaryIO, n: int) -> bytes:
    peek = getattr(stream, "peek", None)
    if peek is not None:
        try:
            return peek(n)[:n]
        except (OSError, ValueError):
            return b""
    return b""


class _Transcoder(io.RawIOBase):
    """UTF-16 in, UTF-8 out, incrementally (memory bounded by one read)."""

    def __init__(self, raw: BinaryIO, encoding: str):
        self._raw = raw
        self._dec = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._buf = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while not self._eof and (n < 0 or len(self._buf) < n):
            raw = self._raw.read(CHUNK)
            if not raw:
                self._eof = True
                self._buf += self._dec.decode(b"", final=True).encode("utf-8", "replace")
                break
            self._buf += self._dec.decode(raw).encode("utf-8", "replace")
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out


def blocks(stream: BinaryIO, chunk: int = CHUNK) -> Iterator[Block]:
    """Split `stream` into blocks of whole lines; overlong lines come in pieces of about `chunk` bytes."""
    if not hasattr(stream, "peek"):
        stream = io.BufferedReader(stream)  # type: ignore[arg-type]
    guards: list[_GzipGuard] = []
    stream = _sniff(stream, guards)
    line = 1
    carry = b""
    while True:
        raw = stream.read(chunk)
        if not raw:
            break
        cut = raw.rfind(b"\n")
        if cut == -1:
            data = carry + raw if carry else raw
            if len(data) < chunk:
                carry = data
                continue
            # One line longer than a block: pass this piece on and keep the line number.
            yield _clean(Block(data, line, True))
            carry = b""
            continue
        # One copy of the block (not two: `carry + raw`, then a slice of it).
        if cut + 1 == len(raw):
            body = carry + raw if carry else raw
        else:
            body = b"".join((carry, memoryview(raw)[:cut + 1]))
        carry = raw[cut + 1:]
        n = body.count(b"\n")
        block = Block(body, line, False, newlines=n)
        line += n
        yield _clean(block)
    if carry:
        yield _clean(Block(carry, line, False))
    damage = next((g.error for g in guards if g.error is not None), None)
    if damage is not None:
        # gzip raises EOFError for a truncated file: not the end of the input, and not Ctrl-D either
        raise CorruptInput(f"truncated or corrupt gzip data ({damage})", line - 1)


# A line a poster copied out of a URL (a search link, an issue template's prefilled title): its spaces are `%20`.
# A person reads it decoded; only lines where %20 outnumbers plain spaces (a log line with one `%20` in a path
# stays as it is), and a newline, CR or NUL escape becomes a space (the line numbering must not change).
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_HAS_ESCAPE = literal_finder(b"%20")


def _unescape(m: re.Match) -> bytes:
    b = bytes.fromhex(m.group(1).decode())
    return b" " if b in (b"\n", b"\r", b"\x00") else b


def _url_decoded(data: bytes, find=_bytes_find) -> bytes:
    """`data` with each line that holds two or more `%20` and more of them than spaces percent-decoded (bytes.find: linear in the block)."""
    out, done = [], 0
    pos = find(data, b"%20", 0)
    while pos != -1:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end == -1 else end
        line = data[start:end]
        if line.count(b"%20") > max(1, line.count(b" ")):
            out += [data[done:start], _ESCAPE.sub(_unescape, line)]
            done = end
        pos = find(data, b"%20", end)
    return b"".join(out) + data[done:] if out else data


# A log pasted into a forum post, a chat or a word processor comes back typeset: `--nproc_per_node` as an en or em
# dash, quotes curly, `...` as one ellipsis character, spaces as non-breaking ones (smartypants, Word's autocorrect,
# GitHub's and Discourse's renderers when the poster did not fence the log). A person reads through that; the
# signatures are written from the code's ASCII, so the reader undoes it. Every one of these but the minus sign is a
# UTF-8 sequence starting 0xE2 0x80 or 0xC2 0xA0: a block of plain ASCII (almost every log) costs two or three
# searches and is not copied. A dash stands for `--` (what smartypants makes an en dash and Word an em dash), a
# hyphen-like one for `-`.
_TYPESET = (
    (b"\xe2\x80\x94", b"--"),   # EM DASH: `--flag` (Word, WordPress)
    (b"\xe2\x80\x93", b"--"),   # EN DASH: `--flag` (smartypants' `--`)
    (b"\xe2\x80\x95", b"--"),   # HORIZONTAL BAR
    (b"\xe2\x80\x90", b"-"), (b"\xe2\x80\x91", b"-"), (b"\xe2\x80\x92", b"-"),   # hyphen, no-break hyphen, figure dash
    (b"\xe2\x80\x98", b"'"), (b"\xe2\x80\x99", b"'"),     # curly single quotes
    (b"\xe2\x80\x9c", b'"'), (b"\xe2\x80\x9d", b'"'),     # curly double quotes
    (b"\xe2\x80\xa6", b"..."),  # HORIZONTAL ELLIPSIS
    (b"\xe2\x80\xaf", b" "), (b"\xe2\x80\x89", b" "),     # narrow no-break and thin spaces
)
_HAS_TYPESET = literal_finder(b"\xe2\x80")
_HAS_NBSP = literal_finder(b"\xc2\xa0")
_HAS_MINUS = literal_finder(b"\xe2\x88\x92")


def _untypeset(data: bytes) -> bytes:
    """`data` with typographic dashes, quotes, ellipses and no-break spaces as the ASCII they stand for (no newline
    is added or removed: line numbers stay)."""
    if _HAS_TYPESET(data):
        for typeset, ascii_ in _TYPESET:
            data = data.replace(typeset, ascii_)
    if _HAS_NBSP(data):
        data = data.replace(b"\xc2\xa0", b" ")
    if _HAS_MINUS(data):
        data = data.replace(b"\xe2\x88\x92", b"-")   # MINUS SIGN (U+2212)
    return data


def _clean(block: Block) -> Block:
    block.size = len(block.data)
    if b"\x1b" in block.data:
        block.data = ANSI_RE.sub(b"", block.data)
    if _HAS_ESCAPE(block.data):   # not `in`: that costs as much as the block's lower() (gatefind.literal_finder)
        block.data = _url_decoded(block.data, FIND)
    block.data = _untypeset(block.data)
    return block

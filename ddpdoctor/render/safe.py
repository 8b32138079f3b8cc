"""Text from the world made safe to print: for a terminal, for `eval`, for slurmstepd.

Log lines, flight-recorder dumps, peer names and paths are written by someone else. Printed raw,
an escape sequence (`ESC c` resets the terminal, OSC 52 writes the clipboard) acts on the reader's
terminal, and a newline in a value adds a line that `eval "$(ddpdoctor arm)"` or slurmstepd
(TaskProlog) executes. Every such value goes through one of these functions.
"""
from __future__ import annotations

import re
import shlex

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI on some terminals),
# and the Unicode line / paragraph separators some terminals and editors break lines at.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_OR_BREAK = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(m: re.Match) -> str:
    c = m.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str) -> str:
    """`text` with every control character but tab and newline shown as an escape (\\x1b...)."""
    return _CONTROL.sub(_escape, text) if isinstance(text, str) else printable(str(text))


def one_line(text: str) -> str:
    """`text` on one line: newlines, tabs and every other control character shown as escapes."""
    return _CONTROL_OR_BREAK.sub(_escape, text) if isinstance(text, str) else one_line(str(text))


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Slurm's TaskProlog takes `export NAME=value` verbatim up to the end of the line: no quoting, so
# only values that need none can be carried (src/slurmd/slurmstepd/task.c: _process_cmd_line).
_TASKPROLOG_VALUE = re.compile(r"^[A-Za-z0-9_./:@=,+-]{0,4096}$")


def export_line(name: str, value: str, *, shell: bool) -> str | None:
    """`export NAME=value` for a POSIX shell (`shell`, value quoted by shlex.quote) or for a Slurm
    TaskProlog (value verbatim: None when it would need quoting). None for a value with a control
    character: quoted, a newline is safe for `eval` but still makes the output two lines."""
    if not _NAME.match(name) or one_line(value) != value:
        return None
    if shell:
        return f"export {name}={shlex.quote(value)}"
    return f"export {name}={value}" if _TASKPROLOG_VALUE.match(value) else None


def note_line(text: str, *, shell: bool) -> str:
    """A line a human reads: a shell comment (`#`) or a TaskProlog `print`; never more than one line."""
    return f"{'#' if shell else 'print'} {one_line(text)}"


_SGR = re.compile(r"\x1b\[[0-9;]{0,16}m")  # Select Graphic Rendition: colour and bold, nothing else


def terminal_text(text: str, *, colour: bool) -> str:
    """What a renderer writes to a terminal: printable(), except (with `colour`) the SGR colour codes
    the renderer itself added. A log's or a peer's own SGR codes survive too with colour on: they can
    only colour text, not move the cursor, reset the terminal (ESC c) or set the clipboard (OSC 52)."""
    if not colour or "\x1b" not in text:
        return printable(text)
    out, pos = [], 0
    for m in _SGR.finditer(text):
        out.append(printable(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(printable(text[pos:]))
    return "".join(out)

"""Human output: one line per check, findings indented with their fix, a footer of counts.

Colour only on a TTY and never when NO_COLOR is set (https://no-color.org).
"""
from __future__ import annotations

import os
import shlex
import sys
from typing import Callable, TextIO

from ddpdoctor.model import CheckResult, Fix, Report, Severity, Status
from ddpdoctor.render.safe import terminal_text

SYMBOL = {
    Status.PASS: "✓", Status.WARN: "!", Status.FAIL: "✗",
    Status.TIMEOUT: "⏱", Status.CRASH: "☠", Status.SKIP: "-",
}
ASCII_SYMBOL = {Status.PASS: "ok", Status.WARN: "!", Status.FAIL: "X", Status.TIMEOUT: "T",
                Status.CRASH: "!!", Status.SKIP: "-"}
COLOUR = {
    Status.PASS: "32", Status.WARN: "33", Status.FAIL: "31",
    Status.TIMEOUT: "35", Status.CRASH: "31;1", Status.SKIP: "2",
}
SEV_WORD = {Severity.INFO: "info", Severity.WARNING: "warning", Severity.ERROR: "error"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _unicode_ok(stream: TextIO) -> bool:
    enc = (getattr(stream, "encoding", None) or "").lower()
    return "utf" in enc


class _Painter:
    def __init__(self, colour: bool, unicode: bool):
        self.colour = colour
        self.symbols = SYMBOL if unicode else ASCII_SYMBOL

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text


def render(report: Report, *, colour: bool = False, unicode: bool = True, verbose: bool = False) -> str:
    p = _Painter(colour, unicode)
    lines = [p(f"ddpdoctor {report.command} on {report.host}", "1")]
    for r in report.results:
        lines.extend(_result_lines(r, p, verbose))
    lines.extend(extra_lines(report))
    lines.append("")
    lines.append(footer(report, p))
    return "\n".join(lines) + "\n"


def _result_lines(r: CheckResult, p: _Painter, verbose: bool) -> list[str]:
    sym = p(p.symbols[r.status], COLOUR[r.status])
    head = f"{sym} {r.id} {r.title}"
    if r.status in (Status.SKIP, Status.TIMEOUT, Status.CRASH) and r.reason:
        head += p(f" ({r.status.value}: {r.reason})", "2" if r.status is Status.SKIP else COLOUR[r.status])
    out = [head]
    for f in r.findings:
        if f.severity is Severity.INFO and not verbose and r.status is Status.PASS:
            out.append(f"    {p(f.message, '2')}")
            continue
        out.append(f"    {SEV_WORD[f.severity]}: {f.message}")
        if f.hint:
            out.append(f"      {p(f.hint, '2')}")
        if f.fix:
            out.extend(fix_lines(f.fix, "      "))
    return out


def fix_lines(fix: Fix, indent: str, fill: Callable[[str], str] = lambda c: c) -> list[str]:
    """A fix as the human output shows it everywhere: summary, `$ export`s, `$ command`s, `| code`.

    `fill` completes command templates (explain fills in the master's name from the log)."""
    out = [f"{indent}fix: {fix.summary}"]
    out += [f"{indent}  $ export {k}={shlex.quote(v)}" for k, v in fix.env.items()]
    out += [f"{indent}  $ {fill(c)}" for c in fix.commands]
    out += [f"{indent}  | {line}" for line in fix.code.splitlines()]
    return out


def extra_lines(report: Report) -> list[str]:
    """The command's own section (the `section` of its Command in ddpdoctor/commands.py, a module with
    lines(report) reading the report's `extra`), after a blank line; nothing when it has none."""
    from ddpdoctor import commands
    command = commands.get(report.command)
    if command is None or command.section is None or not report.extra:
        return []
    import importlib
    out = importlib.import_module(command.section).lines(report)
    return ["", *out] if out else []


def footer(report: Report, p: _Painter | None = None) -> str:
    p = p or _Painter(False, True)
    c = report.counts()
    parts = []
    for key, label, code in (("fail", "failed", "31"), ("timeout", "timed out", "35"), ("crash", "crashed", "31"),
                             ("warn", "warning" + ("s" if c["warn"] != 1 else ""), "33"),
                             ("pass", "passed", "32"), ("skip", "skipped", "2")):
        if c[key]:
            parts.append(p(f"{c[key]} {label}", code))
    took = f"{report.duration_s:.2f}s" if report.duration_s < 10 else f"{report.duration_s:.1f}s"
    return ", ".join(parts or ["no checks ran"]) + f" in {took}"


def write(report: Report, stream: TextIO | None = None, verbose: bool = False) -> None:
    stream = stream or sys.stdout
    colour = use_colour(stream)
    # findings quote hostnames, peer names, log lines: their escape sequences never reach the terminal
    stream.write(terminal_text(render(report, colour=colour, unicode=_unicode_ok(stream), verbose=verbose),
                               colour=colour))
    stream.flush()

"""`ddpdoctor explain`: what a failure mode or a check is about, or what went wrong in a log.

    ddpdoctor explain HOSTNAME_RESOLVES_TO_LOOPBACK     a failure mode: signs, cause, fix, checks
    ddpdoctor explain DD303                             a check: what it verifies, why, how to fix
    ddpdoctor explain DL001                             a lint rule
    ddpdoctor explain --log job.log                     the likely causes of a failed job, with evidence
    ... | ddpdoctor explain --log -                     the same from stdin
    ddpdoctor explain --log r0.log --log r1.log         several ranks' logs (watchdog lines judged together)
    ddpdoctor explain --fr DIR                          flight-recorder dumps: where the ranks diverge
    ddpdoctor explain --watch-events FILE               what `watch` saw (also read beside --fr / --log)
    ddpdoctor explain --list                            every failure id

--log reads within --deadline SECONDS (default 10: a 1 GB log of ordinary lines is read whole at the
measured 150-200 MB/s; docs/explain.md): past it, the verdict comes from what was read and says so.

Exit codes: 0 when it explained something (also when a log shows no known signature), 2 for bad
input (unknown id, unreadable file).
"""
from __future__ import annotations

import difflib
import json
import os
import sys

import time

import click

from ddpdoctor.cli.common import FiniteFloat
from ddpdoctor.validate import BadInput

# Of --deadline, the share kept for what follows the reading (judging, the watchdog view, printing): those
# are bounded (evidence.Collector, watchdog.MAX_KEYS) and take well under a second after any log.
_RESERVE_S = 0.5


def check_page(chk) -> str:
    """The documentation page of a check (also written to checks/<id>.md)."""
    from ddpdoctor.catalog.pages import check_page as page
    return page(chk)


@click.command("explain")
@click.argument("what", required=False, metavar="[FAILURE_ID|DDnnn|DLnnn]")
@click.option("--log", "log_paths", metavar="FILE", multiple=True,
              help="Explain a failed job's log ('-' reads stdin); repeat for several ranks' logs.")
@click.option("--fr", "fr_path", metavar="DIR", help="Explain flight-recorder dumps (a directory or one file).")
@click.option("--watch-events", "events_path", metavar="FILE",
              help="Events `ddpdoctor watch` wrote (default: watch-events.jsonl beside --fr DIR or the first --log).")
@click.option("--json", "json_out", is_flag=True, help="Print only JSON on stdout.")
@click.option("--list", "list_all", is_flag=True, help="List the failure modes of the catalog.")
@click.option("--deadline", type=FiniteFloat(1, 7 * 86400), default=10.0, show_default=True, metavar="SECONDS",
              help="With --log: give the verdict within this many seconds; past it, the rest of the logs is not "
                   "read and the output says so.")
def explain(what: str | None, log_paths: tuple, fr_path: str | None, events_path: str | None, json_out: bool,
            list_all: bool, deadline: float):
    """Explain a failure mode, a check or a lint rule, or find the cause of a failure in a log.

    \b
    ddpdoctor explain --log job.log                 the likely causes, with evidence and the fix
    ddpdoctor explain --log rank0.log --log rank1.log   several ranks' logs, judged together
    ddpdoctor explain --fr DIR                      flight-recorder dumps (the folder given to `arm --dir`)
    ddpdoctor explain DD202                         a check (DL001: a lint rule; NCCL_COLLECTIVE_TIMEOUT: a failure mode)
    """
    given = [x for x in (what is not None, bool(log_paths), fr_path is not None, list_all) if x]
    if len(given) > 1:
        raise BadInput("give one of: a failure id or check id, --log FILE, --fr DIR, or --list")
    if events_path is not None and (what is not None or list_all):
        raise BadInput("--watch-events goes alone or with --log / --fr")
    if list_all:
        _list(json_out)
    elif fr_path is not None:
        _explain_fr(fr_path, json_out, events_path)
    elif log_paths:
        if log_paths.count("-") > 1:
            raise BadInput("--log - (stdin) can be given once")
        from ddpdoctor.flightrec.watchdog import Tap
        taps = [Tap(p if p != "-" else "stdin") for p in log_paths]
        # one deadline for all the logs given, counted from the command's start (like inspect's and network's)
        stop_at = time.monotonic() + max(deadline - _RESERVE_S, deadline / 2)
        done = [_explain_log(p, json_out, tap, stop_at=stop_at, deadline=deadline, first=i == 0)
                for i, (p, tap) in enumerate(zip(log_paths, taps))]
        from ddpdoctor.logscan import joint
        together = joint.judge([ex for _, _, ex in done])  # several logs: one conclusion over them
        _explain_watchdog(taps, json_out, [doc for doc, _, _ in done], together,
                          [ex for _, _, ex in done], events_path, next((p for p in log_paths if p != "-"), None))
        damages = [damage for _, damage, _ in done if damage]
        for damage in damages:  # what was readable is above; the damage is still an input error
            click.echo(f"ddpdoctor: error: {damage}", err=True)
        if damages:
            sys.exit(2)
    elif what is not None:
        _explain_id(what, json_out)
    elif events_path is not None:
        sec = _watch(events_path, None)
        if json_out:
            _json({"schema": 1, "command": "explain", "watch": sec[0]})
        else:
            _echo(sec[1])
    else:
        raise BadInput("say what to explain: a failure id (FIREWALL_BLOCKS_PORTS), a check (DD303), "
                       "or --log FILE; --list lists failure ids")


def _explain_id(what: str, json_out: bool) -> None:
    from ddpdoctor import catalog, registry
    from ddpdoctor.catalog import pages
    from ddpdoctor.finding_kinds import kinds_of

    key = what.strip().upper()
    if registry.ID_RE.match(key):
        chk = registry.get(key)
        if chk is None:
            raise BadInput(f"unknown check {what!r}; `ddpdoctor list-checks` lists them")
        if json_out:
            _json({"schema": 1, "command": "explain", "check": {
                "id": chk.id, "title": chk.title, "category": chk.category, "commands": sorted(chk.tags),
                "what_it_checks": chk.doc_section("What it checks"),
                "why_it_matters": chk.doc_section("Why it matters"), "fix": chk.doc_section("Fix"),
                "failures": [fm.id for fm in catalog.failures_for_check(chk.id)],
                "finding_ids": kinds_of(chk.func).ids(chk.id)}})
        else:
            _echo(pages.check_page(chk))
        return
    if key.startswith("DL") and key[2:].isdigit():
        _explain_lint_rule(key, what, json_out)
        return
    fm = catalog.get(key.replace("-", "_"))
    if fm is None:
        names = list(catalog.failures()) + sorted(registry.load_all())
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; `ddpdoctor explain --list` lists them"
        shown = what if len(what) <= 60 else what[:57] + "..."
        raise BadInput(f"unknown failure id or check {shown!r}{hint}")
    if json_out:
        _json({"schema": 1, "command": "explain", "failure": _failure_dict(fm)})
    else:
        _echo(pages.failure_page(fm))


def _explain_lint_rule(key: str, what: str, json_out: bool) -> None:
    """A lint rule's page, the same text as docs/reference/lint/DLnnn.md (lint's public registry)."""
    from ddpdoctor.lint.gendocs import rule_page
    from ddpdoctor.lint.registry import all_rules

    r = all_rules().get(key)
    if r is None:
        raise BadInput(f"unknown lint rule {what!r}; `ddpdoctor lint --list-rules` lists them")
    if json_out:
        _json({"schema": 1, "command": "explain", "lint_rule": {
            "id": r.id, "title": r.title, "severity": r.severity.label, "fix_kind": r.fix_kind,
            "what_it_checks": r.doc_section("What it checks"), "why_it_matters": r.doc_section("Why it matters"),
            "fix": r.doc_section("Fix")}})
    else:
        _echo(rule_page(r))


def _failure_dict(fm) -> dict:
    return {
        "id": fm.id, "title": fm.title, "category": fm.category,
        "kind": "consequence" if fm.kind == "consequence" else "root cause",
        "summary": fm.summary, "cause": fm.cause, "fix": fm.fix.to_dict(), "checks": list(fm.checks),
        "confirm": fm.confirm, "preflight": fm.preflight, "related": list(fm.related), "sources": list(fm.sources),
        "signatures": [{"pattern": s.pattern, "weight": s.weight, "role": s.role, "example": s.example}
                       for s in fm.signatures],
    }


def _list(json_out: bool) -> None:
    from ddpdoctor import catalog

    fms = list(catalog.failures().values())
    if json_out:
        _json([{"id": fm.id, "category": fm.category, "title": fm.title, "checks": list(fm.checks)} for fm in fms])
        return
    width = max(len(fm.id) for fm in fms)
    _echo("".join(f"{fm.id:<{width}}  {fm.category:<10} {fm.title}\n" for fm in fms))


def _explain_fr(path: str, json_out: bool, events_path: str | None = None) -> None:
    """--fr: flight-recorder dumps (ddpdoctor/flightrec); bad dumps are one line and exit 2."""
    from ddpdoctor import flightrec
    from ddpdoctor.flightrec import render as fr_render

    from ddpdoctor.flightrec.dumps import job_dirs
    jobs = job_dirs(path)
    if jobs:  # `arm --dir D` writes one folder per job below D: the newest job's, and say so
        others = f"; the others: {', '.join(os.path.basename(j) for j in jobs[1:4])}{', ...' if len(jobs) > 4 else ''}" \
            if len(jobs) > 1 else ""
        click.echo(f"ddpdoctor: {path} holds per-job folders; reading the newest, {jobs[0]}{others} "
                   "(give --fr FOLDER for another)", err=True)
        path = jobs[0]
    try:
        dumps, skipped = flightrec.load_dir(path)
    except flightrec.BadDump as e:
        raise BadInput(str(e)) from None
    verdict = flightrec.analyze(dumps, skipped)
    sec = _watch(events_path, path, fr=verdict)
    if json_out:
        _json({"schema": 1, "command": "explain", "flight_recorder": fr_render.to_dict(verdict),
               **({"watch": sec[0]} if sec else {})})
    else:
        _echo(fr_render.divergence_text(verdict, path) + (sec[1] if sec else ""))


def _explain_watchdog(taps, json_out: bool, docs: list, together=None, exs=(), events_path=None,
                      near=None) -> None:
    """After --log: the NCCL watchdog's per-rank progress lines, judged over every log given.

    Text: a section after the log's explanation. JSON: one object on stdout, the log's report with a
    "watchdog" key (several logs: {"logs": [report, ...], "watchdog": ...}).
    """
    from ddpdoctor.flightrec import render as fr_render
    from ddpdoctor.flightrec.watchdog import judge_taps

    view = judge_taps(taps)
    first = next((ex.first_failure for ex in exs if ex.first_failure), None)
    sec = _watch(events_path, near, watchdog=view, first_failure=first,
                 diagnoses=next((ex.diagnoses for ex in exs if ex.diagnoses), []))
    if json_out:
        reports = [json.loads(d) for d in docs]
        obj = reports[0] if len(reports) == 1 else {"schema": 1, "command": "explain", "logs": reports}
        if view.found:
            obj["watchdog"] = fr_render.to_dict(view)
        if together is not None:
            obj["joint"] = together.to_dict()
        if sec:
            obj["watch"] = sec[0]
        _json(obj)
        return
    if view.found:
        _echo(fr_render.watchdog_text(view))
    if together is not None:
        from ddpdoctor.logscan.joint import lines
        _echo("\n".join(lines(together)) + "\n")
    if sec:
        _echo(sec[1])


def _watch(events_path, near, **facts):
    """watch's events (logscan/watchevents.py), compared with this verdict: (JSON, text) or None."""
    from ddpdoctor.logscan.watchevents import BadEvents, for_explain
    try:
        return for_explain(events_path, near, **facts)
    except BadEvents as e:
        raise BadInput(str(e)) from None


def _explain_log(path: str, json_out: bool, tap=None, stop_at: float | None = None,
                 deadline: float = 10.0, first: bool = True) -> tuple[str | None, str, object]:
    """Explain one log: prints the text, or returns the JSON document (the caller prints one object);
    and what damaged the input ('' when none: a truncated .gz is explained up to the damage)."""
    from ddpdoctor.logscan import explain_stream
    from ddpdoctor.logscan import render

    if path == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise BadInput("--log - reads the log from stdin; pipe one in: `cat job.log | ddpdoctor explain --log -`")
        if _is_device(sys.stdin):  # `< /dev/zero` never ends
            raise BadInput("--log -: stdin is a device, not a log; pipe or redirect a file")
        kernel = _kernel_file(sys.stdin)  # `< /proc/kmsg`
        if kernel:
            raise BadInput(f"--log -: stdin is {kernel}")
        stream, source = sys.stdin.buffer, "stdin"
    else:
        try:
            from ddpdoctor.readfile import open_stream
            stream = open_stream(path)  # a FIFO without a writer, /dev/zero, /proc/kmsg: never a wait
        except OSError as e:
            raise BadInput(f"cannot read {path!r}: {e.strerror or e}") from None
        source = path
    if tap is not None:
        from ddpdoctor.flightrec.watchdog import TapStream
        stream = TapStream(stream, tap)
    from ddpdoctor.render.progress import Progress
    total = 0
    if path != "-":
        try:
            total = os.path.getsize(path)
        except OSError:
            total = 0
    bar = Progress()

    def tick(done: int) -> None:  # compressed input reads more bytes than the file holds: no percentage then
        of = f" of {total / 1e6:,.0f} MB" if total and done <= total else ""
        bar.update(f"ddpdoctor: scanning {source}: {done / 1e6:,.0f} MB{of}")
    try:
        try:
            with bar:
                ex = explain_stream(stream, source, progress=tick if bar.on else None, stop_at=stop_at)
        except OSError as e:  # a read error midway (a directory, an I/O error)
            raise BadInput(f"cannot read {path!r}: {e.strerror or e}") from None
    finally:
        if path != "-":
            stream.close()
    damage = (f"{source}: {ex.damaged}; explained only the first {ex.lines} line(s), read before the damage"
              if ex.damaged else "")
    cut = _cut_note(ex, total if path != "-" and not _compressed(path) else 0, deadline, first) if ex.cut else None
    if json_out:
        d = render.to_report(ex).to_dict()
        if cut:
            d["cut"] = cut[0]
        if damage:
            d["exit_code"] = 2
            d["error"] = {"kind": "bad_input", "message": damage}
        from ddpdoctor.render import json as rj
        return rj.document(d), damage, ex
    from ddpdoctor.render.text import use_colour
    text = render.render_text(ex, colour=use_colour(sys.stdout))
    if cut:  # right under the heading line: the first thing after the file's name
        head, _, rest = text.partition("\n")
        text = f"{head}\n{cut[1]}\n{rest}"
    _echo(text)
    return None, damage, ex


def _compressed(path: str) -> bool:
    """A gzip file: its size on disk is not the size of the log read (no "of N MB" then)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _cut_note(ex, total: int, deadline: float, first: bool = True) -> tuple[dict, str]:
    """What the deadline left unread: (JSON, one line of text). The suggested deadline scales the time spent
    by the share of the file not read (doubled: a loaded machine reads slower); unknown size: ten times."""
    import math
    if total and ex.bytes:
        need = deadline * max(2.0, 2.0 * total / ex.bytes)
        of = f" of {total / 1e6:,.0f} MB ({100 * ex.bytes / total:.0f}%)"
    else:
        need, of = deadline * 10, ""
    need = int(math.ceil(need / 10.0) * 10)
    rerun = f"rerun with --deadline {need} to read it all"
    if not ex.bytes:  # the logs before this one took the whole deadline, or (the first) starting up did
        who = "starting up took it: a loaded machine" if first else "the logs before it took it"
        text = (f"The deadline ({deadline:g} s) passed before this log was read ({who}): "
                f"nothing of it was read: {rerun}.")
    else:
        text = (f"The deadline ({deadline:g} s) passed: read {ex.lines:,} lines, {ex.bytes / 1e6:,.0f} MB{of}; the rest "
                f"was not read: {rerun}. What follows comes from the part read, at most low confidence.")
    return {"deadline_s": deadline, "bytes_read": ex.bytes, "lines_read": ex.lines, "bytes_total": total or None,
            "complete": False, "message": text, "rerun": f"--deadline {need}"}, text


def _is_device(f) -> bool:
    import stat
    try:
        mode = os.fstat(f.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def _kernel_file(f) -> str | None:
    from ddpdoctor.readfile import kernel_file
    try:
        return kernel_file(os.fstat(f.fileno()))
    except (OSError, ValueError, AttributeError):
        return None


def _json(obj) -> None:
    from ddpdoctor.render import json as rj
    sys.stdout.write(rj.document(obj) + "\n")
    sys.stdout.flush()


def _echo(text: str) -> None:
    """Write text whatever the terminal's encoding (logs carry arbitrary bytes)."""
    from ddpdoctor.render.safe import terminal_text
    from ddpdoctor.render.text import use_colour
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    text = terminal_text(text, colour=use_colour(sys.stdout))  # a log's or a dump's ESC c never reaches the terminal
    sys.stdout.write(text.encode(enc, "replace").decode(enc, "replace"))
    sys.stdout.flush()

"""Human text and JSON for `ddpdoctor explain --log`."""
from __future__ import annotations

import socket

from ddpdoctor.catalog.model import CONSEQUENCE
from ddpdoctor.logscan import Explanation
# SHOW_FULL: diagnoses at or above it get a full section; LOW: below it a diagnosis is marked "low confidence" and
# weaker alternatives are shown. Defined beside the calibration that decides against them (the ranker uses them too);
# re-exported here, where bench_explain and the tests read them.
from ddpdoctor.logscan.calibration import LOW, SHOW_FULL
from ddpdoctor.logscan.ranker import Diagnosis
from ddpdoctor.model import Report
from ddpdoctor.render.text import fix_lines

MAX_ALTERNATIVES = 2    # weaker alternatives shown in full under a weak best diagnosis (3 when none is shown in full)
MAX_SECTIONS = 5
MAX_EVIDENCE_TEXT = 3   # evidence lines shown per diagnosis in text
MAX_EVIDENCE_JSON = 8
TEXT_WIDTH = 220


def to_report(ex: Explanation) -> Report:
    """The explanation inside the common JSON envelope (schema, command, host, exit_code, ...)."""
    return Report(command="explain", host=socket.gethostname(), results=(), duration_s=ex.duration_s,
                  extra=to_dict(ex))


def to_dict(ex: Explanation) -> dict:
    d = {
        "source": ex.source,
        "lines": ex.lines,
        "bytes": ex.bytes,
        "diagnoses": [_diag_dict(ex, d) for d in ex.diagnoses],
    }
    if ex.first_failure:
        d["first_failure"] = ex.first_failure
    if ex.first_error is not None:
        d["first_error"] = ex.first_error.to_dict()
    return d


def _diag_dict(ex: Explanation, d: Diagnosis) -> dict:
    fm = d.failure
    fix = fm.fix.to_dict()
    fix["commands"] = [ex.confirm.fill(c) for c in fix["commands"]]
    out = {
        "failure": fm.id,
        "title": fm.title,
        "category": fm.category,
        "kind": "consequence" if fm.kind == CONSEQUENCE else "root cause",
        "confidence": round(d.confidence, 2),
        "low_confidence": d.confidence < LOW,
        "evidence": [e.to_dict() for e in d.evidence[:MAX_EVIDENCE_JSON]],
        "fix": fix,
        "confirm": ex.confirm.fill(fm.confirm) if fm.confirm else "",
        "checks": list(fm.checks),
        "more": f"ddpdoctor explain {fm.id}",
    }
    if d.origin:
        out["origin"] = d.origin
    if d.notes:
        out["notes"] = d.notes
    if d.consequence_of:
        out["consequence_of"] = d.consequence_of
    return out


class _Paint:
    def __init__(self, colour: bool):
        self.colour = colour

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text


def render_text(ex: Explanation, *, colour: bool = False) -> str:
    p = _Paint(colour)
    size = f"{ex.lines:,} line{'s' if ex.lines != 1 else ''}"
    out = [p(f"ddpdoctor explain: {ex.source}", "1") + f" ({size}, {ex.duration_s:.1f}s)"]
    if ex.first_failure:
        ff = ex.first_failure
        who = ", ".join(x for x in (ff.get("host") and f"host {ff['host']}",
                                    ff.get("rank") is not None and f"rank {ff['rank']}",
                                    ff.get("exitcode") is not None and f"exit code {ff['exitcode']}") if x)
        out.append(f"torchrun's summary names the first failure: {who} (line {ff['line']})")
    full = [d for d in ex.diagnoses if d.confidence >= SHOW_FULL][:MAX_SECTIONS]
    rest = [d for d in ex.diagnoses if d not in full]
    if not ex.diagnoses:
        out += ["", "No known failure signature in this log."]
        if ex.first_error is not None:
            out.append(f"The first error is on line {ex.first_error.line}: {_clip(ex.first_error.text)}")
        out.append("If the job failed, rerun it with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL and explain "
                   "that log, or run `ddpdoctor network` / `ddpdoctor smoke` on the nodes.")
        return "\n".join(out) + "\n"
    if not full:
        out += ["", "No line in this log points clearly at a cause; possible:"]
    elif full[0].confidence < LOW and full[0].notes and full[0].notes[0].startswith("low confidence"):
        out += ["", "This log shows a generic error, not its cause: the candidates below come from the rest of the "
                    "log, with what would decide between them."]
    elif all(d.failure.kind == CONSEQUENCE for d in full):
        out += ["", "This log shows consequences only; the cause is in another rank's or node's log."]
    numbers = {d.failure.id: i for i, d in enumerate(full, 1)}
    for i, d in enumerate(full, 1):
        out += [""] + _section(ex, d, i, numbers, p)
    # Top-3 honesty: under a weak best diagnosis, the next candidates with why they came up and what decides.
    weak = not full or full[0].confidence < LOW
    alts = rest[:MAX_ALTERNATIVES + (not full)] if weak else []
    for d in alts:   # with no answer shown in full there is nothing for them to be weaker than: candidates
        out += [""] + _alternative(d, p, "weaker alternative" if full else "candidate")
    others = [d for d in rest if d not in alts]
    if others:
        out += ["", "also possible: " + ", ".join(
            f"{d.failure.id} ({_pct(d.confidence)}" + (f", a consequence of {d.consequence_of})" if d.consequence_of
                                                     else ")") for d in others)]
    return "\n".join(out) + "\n"


def _section(ex: Explanation, d: Diagnosis, i: int, numbers: dict, p: _Paint) -> list[str]:
    fm = d.failure
    if fm.kind == CONSEQUENCE:
        role = f"consequence of #{numbers[d.consequence_of]}" if d.consequence_of in numbers else "consequence"
    else:
        role = "root cause"
    head = f"{i}. {p(fm.id, '1;31' if fm.kind != CONSEQUENCE else '1;33')}  {_pct(d.confidence)}  {role}"
    if d.confidence < LOW:
        head += "  (low confidence)"
    if d.origin:
        head += "  on " + " ".join(f"{k} {v}" for k, v in d.origin.items())
    out = [head, f"   {fm.title}"]
    for note in d.notes:
        out.append(f"   {p('why:', '2')} {note}")
    shown = d.evidence[:MAX_EVIDENCE_TEXT]
    out.append(f"   evidence{' (first ' + str(len(shown)) + ' of ' + str(len(d.evidence)) + ')' if len(d.evidence) > len(shown) else ''}:")
    for e in shown:
        out.append(f"     line {e.line}: {_clip(e.text)}")
        if e.note:
            out.append(f"       -> {e.note}")
    out += fix_lines(fm.fix, "   ", ex.confirm.fill)
    if fm.confirm:
        checks = f"   (checks {', '.join(fm.checks)})" if fm.checks else ""
        out.append(f"   confirm: {ex.confirm.fill(fm.confirm)}{checks}")
    out.append(p(f"   more: ddpdoctor explain {fm.id}", "2"))
    return out


def _alternative(d: Diagnosis, p: _Paint, kind: str) -> list[str]:
    """A weaker candidate: one line of title, why it came up (and what would decide), its first evidence."""
    fm = d.failure
    out = [f"   {kind}: {p(fm.id, '1')}  {_pct(d.confidence)}  {fm.title}"]
    for note in d.notes[:2]:
        out.append(f"     {p('why:', '2')} {note}")
    if d.evidence:
        e = d.evidence[0]
        out.append(f"     evidence: line {e.line}: {_clip(e.text)}")
    out.append(p(f"     more: ddpdoctor explain {fm.id}", "2"))
    return out


def _pct(c: float) -> str:
    return f"{round(c * 100)}%"


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= TEXT_WIDTH else text[:TEXT_WIDTH - 3] + "..."

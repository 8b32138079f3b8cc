"""`explain`'s section for watch's events (logscan/watchevents.py read them, logscan/watchagree.py compared)."""
from __future__ import annotations

from ddpdoctor.render.watch import line

MARK = {"agrees": "✓", "partly": "!", "disagrees": "✗"}
SHOWN = 20  # events printed; --json has them all


def text(we, comparisons: list[dict]) -> str:
    evs = [e for e in we.events if e["kind"] != "summary"]
    out = [f"watch events: {len(evs)} from {we.path}" + (" (times UTC)" if evs else "")]
    for e in evs[-SHOWN:]:
        out.append("  " + line(e))
    if len(evs) > SHOWN:
        out.append(f"  ... {len(evs) - SHOWN} earlier event(s) in --json")
    summ = [e for e in we.events if e["kind"] == "summary"]
    if summ:
        out.append("  " + line(summ[-1]))
    for c in comparisons:
        out.append(f"{MARK.get(c['verdict'], '-')} watch {c['verdict']} with the {c['with']}: {c['text']}")
    for n in we.notes:
        out.append(f"  note: {n}")
    return "\n".join(out) + "\n"

"""`python -m ddpdoctor.dev new-mode FAILURE_ID [--category CAT]`: a failure mode and its test log.

Writes ddpdoctor/catalog/modes/<ID>.toml (loaded on its own: no list to edit) and
tests/logs/<ID>/excerpt-<id>.log (tests/test_explain_corpus.py wants every mode explained first from a
log of its own). Both hold TODOs; tests/test_dev_scaffold.py fails while a mode or a log still carries
one. The steps: docs/writing-a-failure-mode.md.
"""
from __future__ import annotations

from pathlib import Path

from ddpdoctor.dev.ids import Refused, id_in_use

ROOT = Path(__file__).resolve().parents[2]

MODE_TEMPLATE = """# TODO: the failure in a few words
id = '{id}'
title = 'TODO: what happens, in one line'
category = '{category}'
origin = 'ddpdoctor'  # found while building ddpdoctor (the 45 of shared/failure-catalog.md say 'reference')
kind = 'root'         # or 'consequence' (a timeout, a dead peer): demoted when a root cause shows
summary = 'TODO: what the user sees.'
cause = 'TODO: why it happens.'
checks = []           # pre-flight checks that catch it (DDnnn ids); when none does, say so in preflight
sources = []          # public reports: 'owner/repo#123'
confirm = 'TODO: a command that confirms it'
preflight = 'TODO: how to catch it before launch.'

[fix]
summary = 'TODO: the fix in one sentence.'
commands = []

# Cite where the message comes from (a torch/NCCL source file, a thread) in a comment here.
[[signatures]]
name = 'TODO_NAME_OF_THE_LINE'
pattern = 'TODO: an error line only this failure prints'
weight = 0.9
example = 'TODO: an error line only this failure prints'
"""

LOG_TEMPLATE = """TODO: replace this file with the log of a job that failed this way (a lab capture, see
tests/logs/capture_lab.py, or an excerpt of a real thread): TODO: an error line only this failure prints
"""


def new_mode(failure_id: str, category: str | None) -> list[Path]:
    from ddpdoctor import catalog
    from ddpdoctor.catalog.model import CATEGORIES, FAILURE_ID_RE
    fid = failure_id.strip()
    if not FAILURE_ID_RE.match(fid):
        raise Refused(f"bad failure id {failure_id!r}: want UPPER_SNAKE with at least two words, e.g. NCCL_IB_TIMEOUT")
    cat = category or "code"
    if cat not in CATEGORIES:
        raise Refused(f"unknown category {cat!r} (one of: {', '.join(CATEGORIES)})")
    mode = ROOT / "ddpdoctor" / "catalog" / "modes" / f"{fid}.toml"
    logs = ROOT / "tests" / "logs" / fid
    if mode.exists() or logs.exists():
        raise Refused(f"{fid} is already used ({(mode if mode.exists() else logs).relative_to(ROOT)}); "
                      "ids are never reused: pick another")
    used = id_in_use(fid, ROOT, registered=catalog.failures())
    if used:
        raise Refused(used)
    mode.write_text(MODE_TEMPLATE.format(id=fid, category=cat), encoding="utf-8")
    logs.mkdir(parents=True)
    log = logs / f"excerpt-{fid.lower().replace('_', '-')}.log"
    log.write_text(LOG_TEMPLATE, encoding="utf-8")
    return [mode, log]

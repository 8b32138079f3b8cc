"""The real-world corpus (tests/corpus/) is well-formed and its frozen split is intact.

Accuracy is not asserted here: benchmarks/bench_explain.py reports it (dev and held-out apart).
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from ddpdoctor import catalog

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS))
import split as corpus_split  # noqa: E402

EVIDENCE = {"confirmed-maintainer", "confirmed-user", "inferred"}
FIELDS = {"id", "file", "url", "thread", "label", "alt_labels", "evidence", "why", "project", "split",
          "collected", "proposed"}
NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")


def records() -> list[dict]:
    out = []
    for n, line in enumerate((CORPUS / "manifest.jsonl").read_text().splitlines(), 1):
        if line.strip():
            rec = json.loads(line)
            rec["_line"] = n
            out.append(rec)
    return out


def test_manifest_records_are_complete():
    recs = records()
    assert len(recs) >= 50
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for r in recs:
        missing = FIELDS - r.keys()
        assert not missing, f"line {r['_line']}: missing {sorted(missing)}"
        assert r["evidence"] in EVIDENCE, r["id"]
        assert r["url"].startswith("https://") and r["url"].startswith(r["thread"]), r["id"]
        assert r["why"].strip() and r["project"].strip(), r["id"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r["collected"]), r["id"]


def test_every_file_exists_and_is_in_its_split_folder():
    listed = set()
    for r in records():
        path = CORPUS / r["file"]
        assert path.is_file(), r["file"]
        assert path.parent.name == r["split"], r["id"]
        assert path.stem == r["id"]
        assert path.read_bytes().strip(), f"{r['file']} is empty"
        listed.add(path)
    on_disk = {p for d in ("dev", "heldout") for p in (CORPUS / d).glob("*.log")}
    assert on_disk == listed, f"logs not in the manifest: {sorted(str(p) for p in on_disk - listed)}"


def test_labels_are_known_modes_unknown_or_declared_proposed():
    known = set(catalog.failures())
    for r in records():
        for label in [r["label"], *r["alt_labels"]]:
            if label == "UNKNOWN" or label in known:
                continue
            assert NAME.match(label), f"{r['id']}: {label!r} is not a failure-mode name"
            if label == r["label"]:
                assert r["proposed"] is True, f"{r['id']}: {label} is not in the catalog and not declared proposed"
        if r["label"] in known or r["label"] == "UNKNOWN":
            assert r["proposed"] is False, f"{r['id']}: {r['label']} is known, not proposed"


def test_no_thread_in_both_splits_and_the_seed_reproduces_the_split():
    splits = defaultdict(set)
    for r in records():
        splits[r["thread"]].add(r["split"])
        assert r["split"] == corpus_split.split_of(r["thread"]), f"{r['id']}: split differs from the seed's"
    assert not [t for t, s in splits.items() if len(s) > 1]


def test_held_out_is_about_a_third_of_threads():
    threads = {r["thread"]: r["split"] for r in records()}
    share = sum(s == "heldout" for s in threads.values()) / len(threads)
    assert 0.15 < share < 0.5, share


@pytest.mark.parametrize("seed_change", [1, 7])
def test_split_rule_depends_on_the_seed(monkeypatch, seed_change):
    """The recorded seed matters: another seed gives another split (so the test above can fail)."""
    threads = sorted({r["thread"] for r in records()})
    base = [corpus_split.split_of(t) for t in threads]
    monkeypatch.setattr(corpus_split, "SEED", corpus_split.SEED + seed_change)
    assert [corpus_split.split_of(t) for t in threads] != base


DECISIVE = {"present", "partial", "absent", "n/a"}


def test_decisive_annotation_is_well_formed_where_present():
    """tests/corpus/README.md, Decisive-line annotation: every record says whether its log holds the line that names
    its label (held-out records since 2026-11-26's first annotation, dev records since the second, so that the two
    splits' scores compare per group); present/partial quote that line verbatim, absent and n/a quote nothing, and
    n/a is for exactly the records without a catalog mode to find (UNKNOWN or proposed)."""
    annotated = 0
    for r in records():
        annotated += 1
        rid = r["id"]
        assert "decisive" in r and "decisive_line" in r, f"{rid}: not annotated (decisive and decisive_line)"
        assert r["decisive"] in DECISIVE, f"{rid}: decisive {r['decisive']!r} not one of {sorted(DECISIVE)}"
        no_mode = r["label"] == "UNKNOWN" or r["proposed"] is True
        assert (r["decisive"] == "n/a") == no_mode, f"{rid}: n/a is for UNKNOWN or proposed labels, and only them"
        quote = r["decisive_line"]
        assert isinstance(quote, str) and len(quote) <= 200, f"{rid}: decisive_line is a string of <= 200 chars"
        if r["decisive"] in ("present", "partial"):
            text = (CORPUS / r["file"]).read_text(errors="replace")
            assert quote.strip() and quote in text, f"{rid}: decisive_line is not a verbatim quote of its log"
        else:
            assert quote == "", f"{rid}: {r['decisive']} quotes no line"
    assert annotated

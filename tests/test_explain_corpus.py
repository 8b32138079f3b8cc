"""Every log of the corpus (tests/logs/<FAILURE_ID>/*.log) is explained by its failure mode first.

Lab logs (lab-*.log) are real torchrun + Gloo output captured in network-namespace clusters by
tests/logs/capture_lab.py (see tests/logs/lab-captures.json for how each was made); excerpts
(excerpt-*.log) are written from documented message templates for what the lab cannot make (NCCL on
several GPUs, InfiniBand, Windows, Slurm). tests/logs/none/ holds logs with no failure.
"""
import json
from pathlib import Path

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import explain_stream

LOGS = Path(__file__).resolve().parent / "logs"
CASES = sorted(p for p in LOGS.glob("*/*.log"))
FAILURE_CASES = [p for p in CASES if p.parent.name != "none"]
CLEAN_CASES = [p for p in CASES if p.parent.name == "none"]


def _ids(path):
    with open(path, "rb") as f:
        return [d.failure.id for d in explain_stream(f, str(path)).diagnoses]


def test_corpus_folders_are_failure_ids():
    for p in CASES:
        assert p.parent.name == "none" or catalog.get(p.parent.name), p


def test_every_failure_mode_has_a_log():
    have = {p.parent.name for p in FAILURE_CASES}
    missing = sorted(set(catalog.failures()) - have)
    assert not missing, f"failure modes without a test log: {missing}"


@pytest.mark.parametrize("path", FAILURE_CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_log_is_explained_by_its_failure_mode_first(path):
    ids = _ids(path)
    assert ids and ids[0] == path.parent.name, ids[:3]


@pytest.mark.parametrize("path", CLEAN_CASES, ids=lambda p: p.name)
def test_clean_log_gets_no_diagnosis(path):
    assert _ids(path) == []


def test_lab_logs_record_how_they_were_made():
    manifest = json.loads((LOGS / "lab-captures.json").read_text())
    files = {m["file"]: m for m in manifest.values()}
    lab_logs = [p for p in CASES if p.name.startswith("lab-")]
    assert len(lab_logs) >= 20
    for p in lab_logs:
        meta = files.get(str(p.relative_to(LOGS)))
        assert meta, f"{p} is not in lab-captures.json"
        assert meta["torch"] and meta["failure"] == p.parent.name
        assert p.stat().st_size > 0

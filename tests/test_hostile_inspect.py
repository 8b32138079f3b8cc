"""`inspect` keeps its own deadline whatever the armed job left (issue 21): a dump directory that takes
longer to read than --deadline allows gives a warning in time, not a late verdict. A real torchrun +
Gloo job, as tests/test_inspect_torchjob.py runs it."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time

import pytest

from test_inspect_torchjob import ROOT, _workers, job  # noqa: F401 (job: the fixture)

# these attacks run the CLI (or a job) in a child process bounded in time and memory (tests/conftest.py kinds)
pytestmark = pytest.mark.torchjob

pytest.importorskip("torch")


def _big_dumps(d, ranks=48, entries=20_000):
    """`ranks` dumps of `entries` entries each (the largest buffer torch allows by default is 20 000):
    seconds to read on this machine, more than the deadline below."""
    from ddpdoctor.flightrec import safe_pickle
    real = safe_pickle.loads((ROOT / "tests" / "flightrec" / "nccl-fr-timeout" / "fr_rank0").read_bytes())
    e0 = real["entries"][0]
    real["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
    real["entries"] = [{**e0, "collective_seq_id": s, "record_id": s} for s in range(1, entries + 1)]
    data = pickle.dumps(real)
    for r in range(ranks):
        (d / f"fr_rank{r}").write_bytes(data)


def test_reading_the_dumps_never_overruns_the_deadline(job, tmp_path):
    fr = tmp_path / "fr"
    fr.mkdir()
    _big_dumps(fr)
    t0 = time.monotonic()
    from ddpdoctor import flightrec
    flightrec.analyze(*flightrec.load_dir(str(fr)))
    read_s = time.monotonic() - t0
    deadline = 4.0
    if read_s < deadline:
        pytest.skip(f"the dumps read in {read_s:.1f} s on this machine: nothing to overrun")
    j = job(2, "other", odd=1, env={"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": f"{fr}/fr_rank"})
    j.wait_ready()
    j.pids = set(_workers(j.proc.pid))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", "--json", "--pid", str(j.proc.pid),
                        "--interval", "0.5", "--deadline", str(deadline)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - t0
    assert p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    # the deadline bounds the work; interpreter start and py-spy's own start come on top
    assert took < deadline + 3, (took, read_s)
    (res,) = [r for r in rep["results"] if r["id"] == "DD516"]
    assert "overran inspect's deadline" in json.dumps(res), res

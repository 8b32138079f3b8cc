"""inspect's whole output (text and JSON) for fixed facts, pinned: refactoring the checks' context must
not change a character. Regenerate on purpose with DDPDOCTOR_REGOLD=1 and read the diff."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ddpdoctor import registry, runner
from ddpdoctor.inspect.sample import InspectFacts
from ddpdoctor.render import json as rj
from ddpdoctor.render import text

GOLDEN = Path(__file__).parent / "golden" / "inspect"
FR = Path(__file__).parent / "flightrec"


def where(call, file, line, kind="collective", func="<module>"):
    return {"kind": kind, "call": call, "file": file, "line": line, "func": func, "active": False}


def rec(rank, w, *, moved=False, cpu=0.0, state="S", local_rank=None, lws=2, world=4, kinds=("", ""), node=None):
    sig = [["f", "x.py", w["line"] if w else 0]]
    samples = []
    for i, k in enumerate(kinds):
        ok = k == ""
        samples.append({"ok": ok, "kind": k, "error": "" if ok else f"{k} error", "took_s": 0.01,
                        "where": w if ok else None, "signature": (sig + [[str(i)]] if moved else sig) if ok else None,
                        "threads": 3})
    out = {"rank": rank, "pid": 1000 + rank, "host": node or "n1", "local_rank": rank if local_rank is None else local_rank,
           "world_size": world, "launcher": "torchrun", "state": state, "state_before": state, "main_thread_cpu": cpu,
           "env": {"LOCAL_WORLD_SIZE": str(lws), "RANK": str(rank)}, "samples": samples, "cmdline": "python t.py"}
    if node:
        out["node"] = node
    return out


AR = where("all_reduce", "train.py", 80)
BC = where("broadcast", "train.py", 57)
SLEEP = where("sleep", "train.py", 42, kind="python", func="step")


def scenarios():
    from ddpdoctor.inspect import armed
    gpus = [{"index": 0, "uuid": "GPU-a", "processes": [{"pid": 1000, "used": 300 << 20}, {"pid": 1001, "used": 812 << 20}]},
            {"index": 1, "uuid": "GPU-b", "processes": [{"pid": 1001, "used": 900 << 20}]}]
    yield "odd_collective", InspectFacts("n1", "torchelastic:abc", [rec(0, AR), rec(1, AR), rec(2, BC), rec(3, AR)], 1.0)
    yield "sleeping_rank", InspectFacts("n1", "torchelastic:abc", [rec(0, AR), rec(1, SLEEP), rec(2, AR)], 1.0,
                                        other_jobs=["master:h:1"])
    yield "gone_stopped_missing", InspectFacts("n1", "j", [rec(0, AR, lws=4), rec(1, AR, lws=4, state="T"),
                                                           rec(2, None, lws=4, state="gone", kinds=("gone", "gone"))], 1.0)
    yield "all_wait_here", InspectFacts("n1", "j", [rec(0, AR), rec(1, AR)], 1.0)
    yield "progressing", InspectFacts("n1", "j", [rec(0, AR, moved=True), rec(1, AR, moved=True, cpu=0.9)], 1.0)
    yield "no_collective_still", InspectFacts("n1", "j", [rec(0, SLEEP), rec(1, SLEEP)], 2.0)
    yield "ptrace", InspectFacts("n1", "j", [rec(0, None, kinds=("permission", "permission")),
                                             rec(1, AR, kinds=("", "timeout"))], 1.0)
    yield "nvml", InspectFacts("n1", "j", [rec(0, AR, moved=True), rec(1, AR, moved=True)], 1.0,
                               nvml={"available": True, "gpus": gpus})
    yield "nvml_ns", InspectFacts("n1", "j", [rec(0, AR, moved=True)], 1.0, pid_namespace_differs=True,
                                  nvml={"available": True, "gpus": [{"index": 0, "uuid": "GPU-a",
                                                                     "processes": [{"pid": 7, "used": 1 << 30}]}]})
    nodes = [{"node": "n1", "index": 0, "reported": True, "error": "", "job": "j", "ranks": 2, "nvml": {},
              "pid_namespace_differs": False, "took_s": 1.0, "since_start_s": 1.0},
             {"node": "n2", "index": 1, "reported": True, "error": "no torch.distributed job on this node", "job": "",
              "ranks": 0, "nvml": {}, "pid_namespace_differs": False, "took_s": 1.0, "since_start_s": 1.0},
             {"node": "n3", "index": 2, "reported": False}]
    yield "gather", InspectFacts("3 nodes", "j", [rec(0, AR, node="n1", world=6), rec(1, BC, node="n1", world=6)],
                                 1.0, nodes=nodes)
    jobs = [{"job": "torchelastic:abc", "launcher": "torchrun", "world_size": 4, "host": "n1", "chosen": True,
             "agents": [{"pid": 900, "kind": "torchrun", "cmdline": "python torchrun t.py", "ranks": [0, 1, 2, 3],
                         "restarts": 1}],
             "ranks": [], "previous_generation": [], "notes": ["restarted 1 time(s) (TORCHELASTIC_RESTART_COUNT=1): "
                                                               "ranks of generation 1"]},
            {"job": "spawn:77", "launcher": "mp.spawn", "world_size": 2, "host": "n1", "chosen": False,
             "agents": [{"pid": 77, "kind": "mp.spawn", "cmdline": "python s.py", "ranks": [0, 1], "restarts": None}],
             "ranks": [{"rank": 0, "pid": 78}, {"rank": 1, "pid": 79}], "previous_generation": [], "notes": []},
            {"job": "agent:300", "launcher": "torchrun", "world_size": None, "host": "n1", "chosen": False,
             "agents": [{"pid": 300, "kind": "torchrun", "cmdline": "python torchrun u.py", "ranks": [], "restarts": None}],
             "ranks": [], "previous_generation": [], "notes": ["torchrun (pid 300) has no live worker"]}]
    yield "several_jobs", InspectFacts("n1", "torchelastic:abc", [rec(0, AR), rec(1, AR), rec(2, BC), rec(3, AR)], 1.0,
                                       jobs=jobs, chosen="the largest of 2 jobs on this node (4 ranks); --pid picks another")
    fr = armed.flight_recorder([str(FR / "gloo-barrier-mismatch")])
    wd = armed.watchdog_lines([str(FR / "nccl-fr-timeout" / "job.log")])
    yield "flightrec_watchdog", InspectFacts("n1", "j", [rec(0, AR), rec(1, AR)], 1.0, flightrec=fr, watchdog=wd)


def render_both(facts) -> tuple[str, str]:
    from ddpdoctor.cli.inspect import build_report
    report = dataclasses.replace(build_report(facts, deadline=30.0, gathered=bool(facts.nodes)), duration_s=0.0)
    report = dataclasses.replace(report, results=tuple(dataclasses.replace(r, duration_s=0.0) for r in report.results))
    out = text.render(report, colour=False, unicode=True, verbose=True)
    return out, rj.render(report)


@pytest.mark.parametrize("name,facts", list(scenarios()), ids=[n for n, _ in scenarios()])
def test_inspect_output_is_unchanged(name, facts):
    txt, js = render_both(facts)
    # the dump paths name the checkout: pin them relative to the repository, wherever it lies
    repo = str(Path(__file__).resolve().parent.parent)
    txt, js = txt.replace(repo, "<repo>"), js.replace(repo, "<repo>")
    for suffix, got in ((".txt", txt), (".json", js)):
        path = GOLDEN / f"{name}{suffix}"
        if os.environ.get("DDPDOCTOR_REGOLD"):
            path.write_text(got)
        assert got == path.read_text(), f"{path.name} changed: DDPDOCTOR_REGOLD=1 to accept, then read the diff"

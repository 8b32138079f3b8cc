"""inspect --gather's plumbing on plain data: where a task sits in the step, and one view from many nodes."""
from __future__ import annotations

import pytest

from ddpdoctor.checks import inspect as J
from ddpdoctor.facts.inspect import InspectContext
from ddpdoctor.inspect import gather
from ddpdoctor.render.inspect import where_table
from ddpdoctor.validate import BadInput
from ports import free_port


def test_the_step_index_comes_from_the_node_list_and_the_first_node_listens():
    env = {"SLURM_STEP_NODELIST": "gpu[01-03]", "SLURMD_NODENAME": "gpu02", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3"}
    s = gather.detect_step(env, port=29403)
    assert (s.index, s.world, s.first, s.run_id, s.representative) == (1, 3, "gpu01", "7.3", True)
    assert not gather.detect_step({**env, "SLURM_LOCALID": "1"}, port=1).representative


def test_outside_a_step_is_one_line_of_bad_input():
    with pytest.raises(BadInput, match="batch script"):
        gather.detect_step({"SLURM_JOB_NODELIST": "n1"}, port=1)


def _rank(rank, node, call, line):
    w = {"kind": "collective", "call": call, "file": "t.py", "line": line, "func": "<module>", "active": False}
    s = {"ok": True, "kind": "", "error": "", "where": w, "signature": [["f", "t.py", line]]}
    return {"rank": rank, "pid": 100 + rank, "host": node, "node": node, "local_rank": rank % 2, "world_size": 6,
            "state": "S", "main_thread_cpu": 0.0, "env": {"LOCAL_WORLD_SIZE": "2"}, "samples": [s, s]}


def test_merged_views_name_the_odd_rank_with_its_node_and_the_node_that_never_reported():
    step = gather.Step(0, 3, "n1", ("n1", "n2", "n3"), "n1", 1, "1.1", True)
    views = {0: {"job": "j", "interval": 1.0, "ranks": [_rank(0, "n1", "all_reduce", 9), _rank(1, "n1", "all_reduce", 9)]},
             1: {"job": "j", "interval": 1.0, "ranks": [_rank(2, "n2", "all_reduce", 9), _rank(3, "n2", "broadcast", 5)]}}
    facts = gather.merge(step, views)

    ctx = InspectContext.from_facts(facts)
    assert [f.message for f in J.ranks_agree_on_collective(ctx)] == [
        "rank 3 on n2 in broadcast at t.py:5 while 3 ranks wait in all_reduce at t.py:9"]
    assert [f.message for f in J.gathered_nodes_reported(ctx)] == [
        "n3 did not report within the deadline: its ranks are unknown"]
    assert list(J.ranks_alive(ctx)) == []  # n3 did not report: its ranks 4, 5 are unknown, not gone
    assert "  n3: did not report" in where_table(facts) and "rank   3 n2 pid" in where_table(facts)


@pytest.mark.torchjob
def test_gather_outside_srun_or_with_pid_is_one_line_exit_2():
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for args in (["--gather"], ["--gather", "--pid", "5"]):
        p = subprocess.run([sys.executable, "-m", "ddpdoctor", "inspect", *args], capture_output=True, text=True,
                           timeout=60, env={**env, "PYTHONPATH": root})
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.torchjob
def test_two_nodes_meet_over_a_real_socket_and_a_foreign_message_is_ignored():
    import json
    import socket
    import threading
    import time

    from ddpdoctor.inspect.sample import InspectFacts, NoJob

    port = free_port()
    steps = [gather.Step(i, 2, f"n{i + 1}", ("n1", "n2"), "127.0.0.1", port, "9.0", True) for i in range(2)]

    def facts(node):
        return lambda: InspectFacts(node, "j", [_rank(0 if node == "n1" else 1, node, "all_reduce", 9)], 1.0)

    def no_job():
        raise NoJob("no torch.distributed job on this node")

    t0 = time.monotonic()
    out = {}
    client = threading.Thread(target=lambda: out.setdefault("c", gather.run(steps[1], no_job, deadline=10, started=t0)))
    client.start()
    # a message for another step on the same port is not taken for a node's view
    def stray():
        for _ in range(50):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(json.dumps({"run": "8.0", "index": 1, "view": {"bogus": 1}}).encode() + b"\n")
                    return
            except OSError:
                time.sleep(0.05)
    threading.Thread(target=stray).start()
    views = gather.run(steps[0], facts("n1"), deadline=10, started=t0)
    client.join(10)
    assert out["c"] is None and sorted(views) == [0, 1]
    assert views[1]["error"] == "no torch.distributed job on this node" and "bogus" not in views[1]
    merged = gather.merge(steps[0], views)
    assert [r["rank"] for r in merged.ranks] == [0] and merged.nodes[1]["error"]
    assert time.monotonic() - t0 < 8  # both reported: no waiting for the deadline


def test_merge_judges_the_dumps_every_node_sent():
    """Dumps on node-local disks: each view carries its node's dumps as data; merge judges them together."""
    from pathlib import Path

    from ddpdoctor.flightrec import load_dir
    from ddpdoctor.flightrec.dumps import to_wire
    dumps, _ = load_dir(str(Path(__file__).parent / "flightrec" / "gloo-barrier-mismatch"))
    step = gather.Step(0, 2, "n1", ("n1", "n2"), "n1", 1, "1.1", True)
    views = {0: {"job": "j", "interval": 1.0, "ranks": [], "fr_dumps": [to_wire(d) for d in dumps[:2]]},
             1: {"job": "j", "interval": 1.0, "ranks": [], "fr_dumps": [to_wire(d) for d in dumps[2:]]}}
    facts = gather.merge(step, views)
    assert facts.flightrec["dir"] == "dumps from 2 node(s): n1, n2"
    g = facts.flightrec["verdict"]["groups"][0]
    assert g["status"] == "mismatch" and g["seq"] == 4

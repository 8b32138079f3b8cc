"""Helpers shared by the `network` lab tests and benchmarks/bench_network_lab.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from lab import run_torchrun_job

PORT = 29400
DD = [sys.executable, "-m", "ddpdoctor"]
JOB_TIMEOUT = 10   # init_process_group timeout inside the job (seconds)
HANG_WALL = 30     # a job that hangs is killed after this; "hung" = still running then
OK_WALL = 90       # a job expected to work or to fail with a message: torch's import alone took 30 s+ at CI's load


def start_listener(lab, node="node1", expect=1, timeout=20):
    p = lab.popen(node, [*DD, "network", "--listen", "--port", str(PORT), "--expect", str(expect),
                         "--timeout", str(timeout), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until the port answers inside the lab (the listener binds before printing anything in --json mode)
    for _ in range(100):
        probe = lab.run(node, [sys.executable, "-c",
                               f"import socket;s=socket.socket();s.settimeout(0.2);print(s.connect_ex(('127.0.0.1',{PORT})))"],
                        timeout=10)
        if probe.stdout.strip() == "0":
            return p
        if p.poll() is not None:
            raise AssertionError(f"listener died: {p.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError("listener did not come up")


def diagnose(lab, node="node2", *args, env=None, listener=True, master="node1", listen_timeout=20):
    """Run `ddpdoctor network --json` on `node` (with a listener on the master) -> (report, seconds, listener json)."""
    lis = start_listener(lab, master, timeout=listen_timeout) if listener else None
    try:
        t0 = time.monotonic()
        cp = lab.run(node, [*DD, "network", "--master", master, "--port", str(PORT), "--json", *args],
                     env=env, timeout=30)
        took = time.monotonic() - t0
    finally:
        lis_json = None
        if lis is not None:
            try:
                out, _ = lis.communicate(timeout=listen_timeout + 5)
                lis_json = json.loads(out) if out.strip() else None
            except subprocess.TimeoutExpired:
                lab.kill(lis)
    assert "Traceback" not in cp.stderr, cp.stderr
    report = json.loads(cp.stdout)
    assert report["exit_code"] == cp.returncode
    return report, took, lis_json


def result(report, check_id):
    (r,) = [r for r in report["results"] if r["id"] == check_id]
    return r


def failing(report):
    return {r["id"] for r in report["results"] if r["status"] in ("fail", "timeout", "crash")}


def fix_env(report, check_id):
    env = {}
    for f in result(report, check_id)["findings"]:
        if f["fix"]:
            env.update(f["fix"]["env"])
    return env


def job(lab, **kw):
    kw.setdefault("job_timeout", JOB_TIMEOUT)
    kw.setdefault("wall_timeout", HANG_WALL)
    return run_torchrun_job(lab, master="node1", port=PORT, **kw)


def all_output(res):
    return "\n".join(res.output.values())


def drop_all_but_rendezvous(lab, node="node1"):
    """New TCP connections to any port but the rendezvous port are dropped (replies still pass)."""
    lab.iptables(node, "-A", "INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "ACCEPT")
    lab.iptables(node, "-A", "INPUT", "-p", "tcp", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
    lab.iptables(node, "-A", "INPUT", "-p", "tcp", "-i", "eth0", "-j", "DROP")


def hostname_on_low_decoy(lab, node="node2"):
    """`node`'s hostname resolves to a decoy interface that no other node can reach and whose
    address sorts below every peer's (so Gloo peers dial it; see tests/lab_jobs/FINDINGS.md 6a)."""
    decoy = lab.decoy_cidr(side="low")
    lab.add_decoy(node, "decoy0", decoy)
    lab.set_hosts(node, {n: lab.addr(n) for n in lab.names if n != node} | {node: decoy.split("/")[0]})

"""Time to a verdict: `ddpdoctor network` vs the real torchrun job, per lab fault scenario.

For every scenario of tests/test_lab_network.py this builds the fault in a fresh 2-node lab, times
`ddpdoctor network --master node1` on the worker (with `--listen` on the master where it applies),
then times a real 2-node torchrun + Gloo job with torch's *default* timeouts until it fails, or
until --wall seconds (then it is still hanging and is killed; the real wait would be longer: c10d
rendezvous join timeout 600 s, Gloo process-group timeout 30 min).

Run as root:  python benchmarks/bench_network_lab.py [--wall 120] [SCENARIO ...]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lab import Lab, run_torchrun_job  # noqa: E402
from netlab import PORT, diagnose, drop_all_but_rendezvous, hostname_on_low_decoy  # noqa: E402

DEFAULT_PG_TIMEOUT = 1800  # torch's default for Gloo process groups (seconds)


def s_healthy(lab):
    return {}


def s_master_unresolvable(lab):
    lab.set_hosts("node2", {"node2": lab.addr("node2")})
    return {}


def s_own_name_unresolvable(lab):
    lab.set_hosts("node2", {"node1": lab.addr("node1")})
    return {}


def s_port_rejected(lab):
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "REJECT",
                 "--reject-with", "tcp-reset")
    return {}


def s_port_dropped(lab):
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")
    return {}


def s_ephemeral_dropped(lab):
    drop_all_but_rendezvous(lab)
    return {"listen_timeout": 5}


def s_decoy(lab):
    hostname_on_low_decoy(lab)
    return {}


def s_gloo_ifname_missing(lab):
    return {"env": {"GLOO_SOCKET_IFNAME": "eth9"}}


SCENARIOS = {
    "healthy": s_healthy,
    "master-unresolvable": s_master_unresolvable,
    "own-name-unresolvable": s_own_name_unresolvable,
    "port-rejected": s_port_rejected,
    "port-dropped": s_port_dropped,
    "ephemeral-dropped": s_ephemeral_dropped,
    "decoy-interface": s_decoy,
    "gloo-ifname-missing": s_gloo_ifname_missing,
    "master-port-in-use": None,  # special: ddpdoctor runs on the master
}


def run_one(name: str, wall: float) -> tuple[str, float, str, float, str]:
    lab = Lab()
    holder = None
    try:
        if name == "master-port-in-use":
            import subprocess
            holder = lab.popen("node1", [sys.executable, "-c",
                                         "import socket,time;s=socket.socket();s.bind(('0.0.0.0',%d));s.listen();"
                                         "print('up',flush=True);time.sleep(3600)" % PORT],
                               stdout=subprocess.PIPE, text=True)
            holder.stdout.readline()
            report, took, _ = diagnose(lab, "node1", listener=False)
            env = {}
        else:
            opts = SCENARIOS[name](lab)
            env = opts.get("env", {})
            report, took, _ = diagnose(lab, env=env or None, listen_timeout=opts.get("listen_timeout", 20))
        verdict = ",".join(sorted(r["id"] for r in report["results"] if r["status"] in ("fail", "timeout"))) or "ok"
        res = run_torchrun_job(lab, master="node1", port=PORT, job_timeout=DEFAULT_PG_TIMEOUT, wall_timeout=wall,
                               env_per_node={"node2": env} if env else None)
        outcome = "passes" if res.ok else ("still hanging" if res.timed_out else "fails")
        return verdict, took, outcome, res.elapsed_s, "" if not res.timed_out else ">="
    finally:
        if holder is not None:
            lab.kill(holder)
        lab.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wall", type=float, default=120.0, help="kill a hanging job after this many seconds")
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    a = ap.parse_args()
    print(f"{'scenario':<24} {'ddpdoctor verdict':<18} {'ddpdoctor':>9}  {'torchrun job':<14} {'job time':>9}  ratio")
    for name in a.scenarios:
        verdict, took, outcome, job_s, ge = run_one(name, a.wall)
        ratio = job_s / took if took else float("inf")
        print(f"{name:<24} {verdict:<18} {took:8.2f}s  {outcome:<14} {ge}{job_s:7.1f}s  {ge}{ratio:5.0f}x", flush=True)


if __name__ == "__main__":
    main()

"""Measure how torchrun + Gloo (the installed torch) behave in broken lab clusters.

Run as root:  python tests/lab_jobs/scenarios.py [--wall 100] [--out results.json] [SCENARIO ...]
Prints one summary per variant and writes JSON (+ full logs next to it).
The results are what tests/lab_jobs/FINDINGS.md and the docstring of tests/lab.py report.

Topology: node1 (master, rendezvous endpoint node1:29400) and node2 (worker).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import lab as L  # noqa: E402

PORT = 29400
IFNAME = {"GLOO_SOCKET_IFNAME": "eth0"}

LISTENER = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
print("listening", flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
"""

FOREIGN_STORE = r"""
import sys, time, datetime
from torch.distributed import TCPStore
st = TCPStore("0.0.0.0", int(sys.argv[1]), is_master=True, multi_tenant=True, timeout=datetime.timedelta(seconds=600))
print("listening", flush=True)
time.sleep(3600)
"""


def _wait_listening(p, timeout=30):
    t = time.monotonic()
    line = p.stdout.readline()
    if "listening" not in line:
        raise RuntimeError(f"listener did not start: {line!r}")
    return time.monotonic() - t


def setup_none(lab):
    pass


def setup_worker_own_unresolvable(lab):
    lab.set_hosts("node2", {"node1": lab.addr("node1")})


def setup_master_unresolvable(lab):
    lab.set_hosts("node2", {"node2": lab.addr("node2")})


def setup_rdzv_reject(lab):
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "REJECT")


def setup_rdzv_drop(lab):
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "DROP")


def setup_only_rdzv_port_open(lab):
    lab.iptables("node1", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "ACCEPT")
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "-j", "DROP")


def _decoy(lab, side):
    cidr = lab.decoy_cidr(2, side)
    lab.add_decoy("node2", "docker0", cidr)
    decoy = cidr.split("/")[0]
    lab.set_hosts("node2", {"node1": lab.addr("node1"), "node2": decoy})
    return decoy


def setup_decoy_low_unroutable(lab):
    _decoy(lab, "low")


def setup_decoy_high_unroutable(lab):
    _decoy(lab, "high")


def setup_decoy_low_blackhole(lab):
    # node1 routes the decoy subnet to node2, node2 silently drops it: like a
    # real cluster where the decoy address goes to a default gateway and vanishes.
    decoy = _decoy(lab, "low")
    lab.ip("node1", "route", "add", str(lab.decoy_subnet("low")), "via", lab.addr("node2"))
    lab.iptables("node2", "-A", "INPUT", "-i", "eth0", "-d", decoy, "-j", "DROP")


def setup_hostname_127011(lab):
    lab.set_hosts("node2", {"node1": lab.addr("node1"), "node2": "127.0.1.1"})


def setup_port_held_listener(lab):
    p = lab.popen("node1", [sys.executable, "-c", LISTENER, str(PORT)], stdout=-1, stderr=-2, text=True)
    _wait_listening(p)


def setup_port_held_store(lab):
    p = lab.popen("node1", [sys.executable, "-c", FOREIGN_STORE, str(PORT)], stdout=-1, stderr=-2, text=True)
    _wait_listening(p)


# name -> (setup, [(variant, job kwargs)])
SCENARIOS = {
    "healthy": (setup_none, [("c10d", {}), ("static", {"rdzv": "static"})]),
    "worker_own_hostname_unresolvable": (setup_worker_own_unresolvable, [
        ("c10d", {}), ("static", {"rdzv": "static"}),
        ("c10d+IFNAME=eth0", {"env": IFNAME}), ("static+IFNAME=eth0", {"rdzv": "static", "env": IFNAME}),
        ("c10d node2 is_host=0", {"extra_args_per_node": {"node2": ["--rdzv-conf=is_host=0"]}}),
        ("c10d node2 is_host=0+IFNAME=eth0", {"env": IFNAME,
                                              "extra_args_per_node": {"node2": ["--rdzv-conf=is_host=0"]}})]),
    "master_unresolvable_on_worker": (setup_master_unresolvable, [
        ("c10d", {}), ("static", {"rdzv": "static"}),
        ("c10d endpoint=IP", {"master_addr": "ADDR1"}), ("static master=IP", {"rdzv": "static", "master_addr": "ADDR1"}),
        ("c10d endpoint=IP+node1 --local-addr=IP", {"master_addr": "ADDR1",
                                                    "extra_args_per_node": {"node1": ["--local-addr=ADDR1"]}})]),
    "rdzv_port_reject": (setup_rdzv_reject, [("c10d", {}), ("static", {"rdzv": "static"})]),
    "rdzv_port_drop": (setup_rdzv_drop, [("c10d", {}), ("static", {"rdzv": "static"})]),
    "only_rdzv_port_open_on_master": (setup_only_rdzv_port_open, [("c10d", {}), ("static", {"rdzv": "static"})]),
    "hostname_to_decoy_low_unroutable": (setup_decoy_low_unroutable, [
        ("c10d", {}), ("static", {"rdzv": "static"}),
        ("c10d+IFNAME=eth0", {"env": IFNAME}), ("static+IFNAME=eth0", {"rdzv": "static", "env": IFNAME})]),
    "hostname_to_decoy_low_blackhole": (setup_decoy_low_blackhole, [
        ("c10d", {}), ("static", {"rdzv": "static"}), ("c10d+IFNAME=eth0", {"env": IFNAME})]),
    "hostname_to_decoy_high_unroutable": (setup_decoy_high_unroutable, [
        ("c10d", {}), ("static", {"rdzv": "static"})]),
    "hostname_to_127.0.1.1": (setup_hostname_127011, [
        ("c10d", {}), ("static", {"rdzv": "static"}), ("c10d+IFNAME=eth0", {"env": IFNAME})]),
    "gloo_ifname_missing": (setup_none, [
        ("c10d IFNAME=eth9 on node2", {"env_per_node": {"node2": {"GLOO_SOCKET_IFNAME": "eth9"}}}),
        ("static IFNAME=eth9 on node2", {"rdzv": "static", "env_per_node": {"node2": {"GLOO_SOCKET_IFNAME": "eth9"}}}),
        ("c10d IFNAME=eth9 on all", {"env": {"GLOO_SOCKET_IFNAME": "eth9"}})]),
    "master_port_held_by_listener": (setup_port_held_listener, [("c10d", {}), ("static", {"rdzv": "static"})]),
    "master_port_held_by_foreign_tcpstore": (setup_port_held_store, [("c10d", {}), ("static", {"rdzv": "static"})]),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--wall", type=float, default=100)
    ap.add_argument("--job-timeout", type=float, default=15)
    ap.add_argument("--out", default="/tmp/ddplab-scenarios/results.json")
    ap.add_argument("--variant", default=None, help="substring filter on variant names")
    ap.add_argument("--short-rdzv", action="store_true",
                    help="shorten rendezvous timeouts (c10d join_timeout=45, static timeout=45) "
                         "to see how a hang finally ends")
    ap.add_argument("--tag", default="", help="suffix for result keys")
    a = ap.parse_args()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out.read_text()) if out.exists() else {}
    for name in a.names or list(SCENARIOS):
        setup, variants = SCENARIOS[name]
        for vname, kw in variants:
            if a.variant and a.variant not in vname:
                continue
            with L.Lab() as lab:
                setup(lab)
                kw = dict(kw)
                if a.short_rdzv:
                    kw["rdzv_conf"] = "timeout=45" if kw.get("rdzv") == "static" else "join_timeout=45"
                if kw.get("master_addr") == "ADDR1":
                    kw["master_addr"] = lab.addr("node1")
                if "extra_args_per_node" in kw:
                    kw["extra_args_per_node"] = {n: [x.replace("ADDR1", lab.addr("node1")) for x in v]
                                                 for n, v in kw["extra_args_per_node"].items()}
                r = L.run_torchrun_job(lab, master="node1", port=PORT, job_timeout=a.job_timeout,
                                       wall_timeout=a.wall, **kw)
            key = f"{name} / {vname}{a.tag}"
            print(f"=== {key}\n{r.summary()}\n", flush=True)
            safe = key.replace(" ", "_").replace("/", "-")
            for n, text in r.output.items():
                (out.parent / f"{safe}.{n}.log").write_text(text)
            results[key] = {"ok": r.ok, "timed_out": r.timed_out, "elapsed_s": round(r.elapsed_s, 1),
                            "rc": r.rc, "node_elapsed_s": {k: (None if v is None else round(v, 1))
                                                           for k, v in r.node_elapsed_s.items()},
                            "key_lines": {n: r.key_lines(n, 20) for n in r.output},
                            "wall": a.wall, "job_timeout": a.job_timeout}
            out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

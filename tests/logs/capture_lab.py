"""Regenerate the lab-made logs of the explain corpus: real torchrun + Gloo failures in the
network-namespace lab of tests/lab.py.

Run as root (network namespaces, iptables, a memory cgroup):

    python tests/logs/capture_lab.py --list
    python tests/logs/capture_lab.py                 # every capture
    python tests/logs/capture_lab.py loopback-c10d   # some

Each capture writes tests/logs/<FAILURE_ID>/lab-<name>.log (or tests/logs/none/ for a healthy job)
and records how it was made in tests/logs/lab-captures.json (torch version, command, exit codes).
Multi-node logs interleave the nodes' lines in arrival order with a `node: ` label, as pdsh or
`srun --label` would; `--worker-only` captures keep one node's raw output.

Not part of the test run (2 cores, minutes per capture): the tests read the committed files.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "lab_jobs"))
import lab as L  # noqa: E402
import scenarios as SC  # noqa: E402  (setups of the network lab scenarios)

JOBS = HERE / "jobs"
PORT = 29400
RDZV_CONF = "join_timeout=20,read_timeout=10,last_call_timeout=2"
MANIFEST = HERE / "lab-captures.json"


@dataclass
class Capture:
    name: str
    failure: str                 # expected top diagnosis ("none" for a healthy job)
    setup: Callable = SC.setup_none
    nodes: tuple[str, ...] = ("node1", "node2")
    run: str = "torchrun"        # "torchrun" or "shell"
    rdzv: str = "c10d"
    endpoint: str | None = None  # rendezvous host (default node1); "ADDR1" = node1's address
    rdzv_ids: dict = field(default_factory=dict)   # per-node --rdzv-id overrides
    node_ranks: dict = field(default_factory=dict)  # per-node --node-rank overrides (static)
    extra_args: tuple[str, ...] = ()
    script: str = str(L.ALLREDUCE_SCRIPT)
    script_args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    env_per_node: dict = field(default_factory=dict)
    only: tuple[str, ...] = ()   # start torchrun only on these nodes
    keep: tuple[str, ...] = ()   # write only these nodes' output (raw, no label)
    nproc: int = 1
    wall: float = 60
    shell: list[str] | None = None
    cgroup_mb: int = 0           # put the launcher in a memory cgroup of this size (cgroup v1)
    note: str = ""


def _argv(c: Capture, lab: L.Lab, node: str, rank: int) -> list[str]:
    if c.run == "shell":
        return list(c.shell or [])
    n = len(c.nodes)
    if c.rdzv == "standalone":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nnodes={n}",
                f"--nproc-per-node={c.nproc}", "--max-restarts=0", "--monitor-interval=0.5",
                f"--rdzv-conf={RDZV_CONF}", *c.extra_args, c.script, *c.script_args]
    host = c.endpoint or c.nodes[0]
    if host == "ADDR1":
        host = lab.addr(c.nodes[0])
    argv = L.torchrun_argv(nnodes=n, rdzv=c.rdzv, endpoint_host=host, port=PORT,
                           node_rank=c.node_ranks.get(node, rank), rdzv_id=c.rdzv_ids.get(node, f"job-{lab.id}"),
                           script=c.script, script_args=c.script_args,
                           rdzv_conf=RDZV_CONF if c.rdzv == "c10d" else None, extra_args=c.extra_args)
    return [a if not a.startswith("--nproc-per-node=") else f"--nproc-per-node={c.nproc}" for a in argv]


def run_capture(c: Capture) -> tuple[str, dict]:
    lines: list[tuple[float, str, bytes]] = []
    lock = threading.Lock()
    rcs: dict[str, int | None] = {}
    argvs: dict[str, list[str]] = {}
    with L.Lab(c.nodes) as lab:
        c.setup(lab)
        procs = {}
        started = [n for n in c.nodes if not c.only or n in c.only]
        for rank, node in enumerate(c.nodes):
            if node not in started:
                continue
            env = {"LAB_PG_TIMEOUT": "10", "JOB_PG_TIMEOUT": "10", **c.env, **c.env_per_node.get(node, {})}
            argvs[node] = _argv(c, lab, node, rank)
            p = lab.popen(node, argvs[node], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs[node] = p
            if c.cgroup_mb:  # before torchrun starts its workers: they inherit the cgroup
                _OOM_CG.mkdir(exist_ok=True)
                (_OOM_CG / "memory.limit_in_bytes").write_text(str(c.cgroup_mb << 20))
                (_OOM_CG / "tasks").write_text(str(p.pid))

            def pump(node=node, p=p):
                for raw in iter(p.stdout.readline, b""):
                    with lock:
                        lines.append((time.monotonic(), node, raw))

            threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + c.wall
        while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
            time.sleep(0.1)
        for node, p in procs.items():
            rcs[node] = p.poll()
            with contextlib.suppress(Exception):
                lab.kill(p)
        time.sleep(0.3)
    keep = c.keep or tuple(started)
    label = len(keep) > 1
    out = []
    for _, node, raw in sorted(lines, key=lambda t: t[0]):
        if node in keep:
            text = raw.decode("utf-8", "replace")
            out.append(f"{node}: {text}" if label else text)
    meta = {"failure": c.failure, "nodes": list(c.nodes), "kept": list(keep), "exit_codes": rcs,
            "killed_at_wall": [n for n, rc in rcs.items() if rc is None], "argv": argvs, "env": c.env,
            "env_per_node": c.env_per_node, "note": c.note}
    return "".join(out), meta


def _setup_vip_not_self(lab: L.Lab) -> None:
    """The endpoint is a service name whose address (a VIP) is on no node; DNAT sends it to node1,
    like a Kubernetes ClusterIP. No node recognises the name as itself, so no node hosts the store."""
    vip = lab.decoy_cidr(9).split("/")[0]
    for n in lab.names:
        lab.set_hosts(n, {**{m: lab.addr(m) for m in lab.names}, "trainer-master": vip})
        lab.ip(n, "route", "add", str(lab.decoy_subnet), "dev", "eth0")
        lab.iptables(n, "-t", "nat", "-A", "OUTPUT", "-d", vip, "-j", "DNAT", "--to-destination", lab.addr("node1"))


def _setup_reject_host_prohibited(lab: L.Lab) -> None:
    """firewalld's default: everything but the rendezvous port is rejected with icmp-host-prohibited."""
    lab.iptables("node1", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(PORT), "-j", "ACCEPT")
    lab.iptables("node1", "-A", "INPUT", "-i", "eth0", "-j", "REJECT", "--reject-with", "icmp-host-prohibited")


def _setup_k8s_names(lab: L.Lab) -> None:
    """The master is reached by a PyTorchJob-style service name that node2 cannot resolve yet."""
    lab.set_hosts("node1", {"node1": lab.addr("node1"), "node2": lab.addr("node2"),
                            "pytorchjob-master-0": lab.addr("node1")})
    lab.set_hosts("node2", {"node1": lab.addr("node1"), "node2": lab.addr("node2")})


def _setup_small_shm(lab: L.Lab) -> None:
    lab.mount_tmpfs("node1", "/dev/shm", "8M")


_OOM_CG = Path("/sys/fs/cgroup/memory") / f"ddpdoctor-capture-{os.getpid()}"


def _job(name: str) -> str:
    return str(JOBS / name)


ONE = ("node1",)
SINGLE = dict(nodes=ONE, rdzv="standalone", nproc=2)
INFO = {"LOGLEVEL": "INFO"}

CAPTURES = [
    Capture("healthy-c10d", "none", note="a job that works: no diagnosis expected"),
    Capture("healthy-static-info", "none", rdzv="static", env=INFO, note="LOGLEVEL=INFO, works"),
    Capture("loopback-c10d", "HOSTNAME_RESOLVES_TO_LOOPBACK", SC.setup_hostname_127011,
            note="node2's /etc/hosts maps its name to 127.0.1.1 (Debian default)"),
    Capture("loopback-static", "HOSTNAME_RESOLVES_TO_LOOPBACK", SC.setup_hostname_127011, rdzv="static"),
    Capture("loopback-c10d-worker-only", "RDZV_STORE_HOST_EXITED", SC.setup_hostname_127011, keep=("node2",),
            note="only the worker's log: it shows the master going away, the cause is in the master's log"),
    Capture("loopback-c10d-master-only", "HOSTNAME_RESOLVES_TO_LOOPBACK", SC.setup_hostname_127011, keep=("node1",)),
    Capture("own-hostname-unresolvable-c10d", "HOSTNAME_UNRESOLVABLE", SC.setup_worker_own_unresolvable),
    Capture("own-hostname-unresolvable-static", "HOSTNAME_UNRESOLVABLE", SC.setup_worker_own_unresolvable,
            rdzv="static", note="Gloo falls back to 127.0.0.1 on node2; node1 is refused there"),
    Capture("master-unresolvable-c10d", "HOSTNAME_UNRESOLVABLE", SC.setup_master_unresolvable, wall=75),
    Capture("master-unresolvable-static", "HOSTNAME_UNRESOLVABLE", SC.setup_master_unresolvable, rdzv="static",
            wall=75),
    Capture("master-unresolvable-endpoint-ip", "HOSTNAME_UNRESOLVABLE", SC.setup_master_unresolvable,
            endpoint="ADDR1", note="endpoint given as an IP, but torchrun hands out the master's hostname"),
    Capture("rdzv-port-drop-c10d", "RDZV_ENDPOINT_UNREACHABLE", SC.setup_rdzv_drop, wall=75),
    Capture("rdzv-port-reject-c10d", "RDZV_ENDPOINT_UNREACHABLE", SC.setup_rdzv_reject, wall=75),
    Capture("master-not-started", "RDZV_ENDPOINT_UNREACHABLE", only=("node2",), keep=("node2",), wall=75,
            note="the master's torchrun was never started"),
    Capture("only-rdzv-port-open-c10d", "FIREWALL_BLOCKS_PORTS", SC.setup_only_rdzv_port_open),
    Capture("only-rdzv-port-open-static", "FIREWALL_BLOCKS_PORTS", SC.setup_only_rdzv_port_open, rdzv="static",
            wall=75),
    Capture("reject-host-prohibited-c10d", "FIREWALL_BLOCKS_PORTS", _setup_reject_host_prohibited),
    Capture("reject-host-prohibited-static", "FIREWALL_BLOCKS_PORTS", _setup_reject_host_prohibited, rdzv="static"),
    Capture("gloo-ifname-missing-on-node2", "GLOO_SOCKET_IFNAME_INVALID",
            env_per_node={"node2": {"GLOO_SOCKET_IFNAME": "eth9"}}),
    Capture("gloo-ifname-missing-master-only", "RDZV_NODES_MISSING",
            env_per_node={"node2": {"GLOO_SOCKET_IFNAME": "eth9"}}, keep=("node1",),
            note="the master's log when node2 failed at init: it only shows waiting for a rank"),
    Capture("gloo-ifname-nccl-syntax", "GLOO_SOCKET_IFNAME_INVALID", rdzv="static",
            env={"GLOO_SOCKET_IFNAME": "^lo,docker"}),
    Capture("master-port-held-static", "MASTER_PORT_IN_USE", SC.setup_port_held_listener, rdzv="static"),
    Capture("master-addr-brackets", "none", rdzv="static", endpoint="[node1]", wall=45,
            note="torchrun 2.13 strips the brackets of --master-addr=[node1]: the job works"),
    Capture("master-addr-leading-space", "none", rdzv="static", endpoint=" node1", wall=45,
            note="torchrun 2.13 strips the space of --master-addr=' node1': the job works"),
    Capture("master-addr-env-leading-space", "MASTER_ADDR_MALFORMED", run="shell",
            shell=[sys.executable, _job("env_init.py")],
            env={"MASTER_ADDR": " node1", "MASTER_PORT": str(PORT), "WORLD_SIZE": "2"},
            env_per_node={"node1": {"RANK": "0"}, "node2": {"RANK": "1"}}, wall=45,
            note="a launch script exports MASTER_ADDR with a leading space and calls init_process_group(env://)"),
    Capture("master-addr-env-brackets", "MASTER_ADDR_MALFORMED", run="shell",
            shell=[sys.executable, _job("env_init.py")],
            env={"MASTER_ADDR": "[node1]", "MASTER_PORT": str(PORT), "WORLD_SIZE": "2"},
            env_per_node={"node1": {"RANK": "0"}, "node2": {"RANK": "1"}}, wall=45,
            note="MASTER_ADDR in URL brackets, init_process_group(env://)"),
    Capture("rank-beyond-world-size", "RANK_OUT_OF_WORLD_SIZE", run="shell",
            shell=[sys.executable, _job("env_init.py")],
            env={"MASTER_ADDR": "node1", "MASTER_PORT": str(PORT), "WORLD_SIZE": "2", "JOB_PG_TIMEOUT": "10"},
            env_per_node={"node1": {"RANK": "0"}, "node2": {"RANK": "2"}}, wall=45,
            note="a hand-written launch script numbers the second node's process RANK=2 of WORLD_SIZE=2 "
                 "(init_process_group(env://), Gloo)"),
    Capture("rdzv-endpoint-not-self", "RDZV_HOST_NOT_SELF_RECOGNIZED", _setup_vip_not_self,
            endpoint="trainer-master", wall=75),
    Capture("rdzv-id-empty", "RDZV_ID_MISMATCH", rdzv_ids={"node1": "", "node2": ""}, wall=75,
            note="--rdzv-id= (an unset variable): each node invents a run id"),
    Capture("rdzv-id-differs-info", "RDZV_ID_MISMATCH", rdzv_ids={"node1": "job-17", "node2": "job-18"}, env=INFO,
            wall=75),
    Capture("standalone-multinode-info", "STANDALONE_WITH_MULTINODE", rdzv="standalone", env=INFO, wall=75),
    Capture("node-rank-duplicated-info", "NODE_RANK_DUPLICATED", rdzv="static", node_ranks={"node2": 0}, env=INFO,
            wall=75, note="both nodes started with --node-rank=0; they wait (900 s in a real job) until the wall "
                          "limit kills node1, which node2 then reports"),
    Capture("k8s-service-name", "K8S_DNS_NOT_READY", _setup_k8s_names, endpoint="pytorchjob-master-0", wall=75,
            note="PyTorchJob-style service name that the worker cannot resolve yet (missing hosts entry)"),
    Capture("local-rank-argparse", "LOCAL_RANK_ARG_MISMATCH", nodes=ONE, run="shell",
            shell=[sys.executable, "-m", "torch.distributed.launch", "--nproc-per-node=2", "--nnodes=1",
                   _job("local_rank_argparse.py")]),
    Capture("oom-killer", "HOST_OOM_SIGKILL", script=_job("oom.py"), cgroup_mb=2048, **SINGLE,
            note="torchrun runs in a 2 GB memory cgroup; rank 1 loads 'data' until the kernel's OOM killer "
                 "kills it"),
    Capture("dataloader-small-shm", "DATALOADER_SHM_BUS_ERROR", _setup_small_shm, script=_job("shm_dataloader.py"),
            **SINGLE, note="/dev/shm is an 8 MB tmpfs in the node"),
    # A real open-files limit: the launcher's shell lowers `ulimit -n` (a login class, a container's nofile) and
    # the trainer keeps every storage its DataLoader workers pass it as a descriptor (file_descriptor strategy).
    Capture("dataloader-open-files-limit", "DATALOADER_OPEN_FILES_LIMIT", nodes=ONE, run="shell", wall=90,
            shell=["/bin/sh", "-c", f"ulimit -n 256; exec {sys.executable} -m torch.distributed.run --standalone "
                   f"--nproc-per-node=2 --max-restarts=0 --monitor-interval=0.5 {_job('fd_dataloader.py')}"],
            note="ulimit -n 256 in the launcher's shell; each sample is four tensors the trainer keeps"),
    Capture("no-init-process-group", "DEFAULT_PG_NOT_INITIALIZED", script=_job("no_init.py"), **SINGLE),
    Capture("ddp-unused-head", "DDP_UNUSED_PARAMETERS", script=_job("ddp_unused.py"), **SINGLE),
    Capture("user-valueerror-rank1", "USER_CODE_EXCEPTION", script=_job("user_valueerror.py"), **SINGLE,
            note="rank 1 raises ValueError in its data loop; torchrun stops rank 0 (a Gloo peer closed)"),
    Capture("user-valueerror-store-rank", "USER_CODE_EXCEPTION", script=_job("user_valueerror.py"),
            env={"JOB_BAD_RANK": "0"}, nodes=ONE, rdzv="standalone", nproc=3,
            note="rank 0 (the store's host) raises ValueError; torchrun stops the two others"),
    Capture("collective-mismatch-detail", "COLLECTIVE_MISMATCH_ACROSS_RANKS", script=_job("collective_mismatch.py"),
            env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, **SINGLE),
    Capture("straggler-eval", "GLOO_COLLECTIVE_TIMEOUT", script=_job("straggler.py"),
            env={"JOB_PG_TIMEOUT": "8", "JOB_EVAL_S": "20"}, **SINGLE),
    Capture("uneven-inputs-join", "UNEVEN_INPUTS_HANG", script=_job("uneven_join.py"), **SINGLE),
    Capture("peer-exits-early", "GLOO_PEER_EXITED", script=_job("peer_exits.py"), **SINGLE),
    # The launcher in the foreground of a session that closes: the shell hangs it up (kill -HUP, what the kernel
    # sends a session's processes when its terminal goes) once rank 0 says it trains.
    Capture("torchrun-sighup", "LAUNCHER_HANGUP_SIGHUP", nodes=ONE, run="shell", wall=90,
            shell=["/bin/sh", "-c", f"rm -f /tmp/ddpdoctor-hup-ready; JOB_READY_FILE=/tmp/ddpdoctor-hup-ready "
                   f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node=2 --max-restarts=0 "
                   f"{_job('hangup_wait.py')} & p=$!; i=0; while [ ! -e /tmp/ddpdoctor-hup-ready ] && [ $i -lt 600 ]; "
                   "do sleep 0.1; i=$((i+1)); done; sleep 1; kill -HUP $p; wait $p; rc=$?; rm -f /tmp/ddpdoctor-hup-ready; exit $rc"],
            note="a healthy 2-rank job; its launcher gets SIGHUP once rank 0 trains (a closed terminal)"),
    Capture("script-not-found", "TRAINING_SCRIPT_NOT_FOUND", nodes=ONE, run="shell",
            shell=[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                   "--max-restarts=0", "src/train_missing.py"],
            note="torchrun given a relative script path that does not exist where it starts"),
    Capture("ddp-model-count-differs", "DDP_MODEL_MISMATCH_ACROSS_RANKS", script=_job("ddp_model_mismatch.py"),
            env={"JOB_MISMATCH": "count"}, **SINGLE, note="rank 1 builds one more layer than rank 0"),
    Capture("ddp-model-shape-differs", "DDP_MODEL_MISMATCH_ACROSS_RANKS", script=_job("ddp_model_mismatch.py"),
            env={"JOB_MISMATCH": "shape"}, **SINGLE, note="rank 1 builds a wider layer than rank 0"),
    Capture("torchrun-not-on-path-sh", "LAUNCHER_NOT_ON_PATH", nodes=ONE, run="shell",
            shell=["/bin/sh", "-c", "torchrun --nproc-per-node=8 train.py"], env={"PATH": "/usr/bin:/bin"}),
    Capture("torchrun-not-on-path-bash", "LAUNCHER_NOT_ON_PATH", nodes=ONE, run="shell",
            shell=["/bin/bash", "-c", "torchrun --nproc-per-node=8 train.py"], env={"PATH": "/usr/bin:/bin"}),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for c in CAPTURES:
            print(f"{c.name:<36} {c.failure}")
        return 0
    ok, why = L.lab_available()
    if not ok:
        print(f"lab unavailable: {why}", file=sys.stderr)
        return 2
    import torch

    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    todo = [c for c in CAPTURES if not a.names or c.name in a.names]
    unknown = set(a.names) - {c.name for c in CAPTURES}
    if unknown:
        print(f"unknown captures: {sorted(unknown)}", file=sys.stderr)
        return 2
    try:
        for c in todo:
            t0 = time.monotonic()
            text, meta = run_capture(c)
            folder = HERE / (c.failure if c.failure != "none" else "none")
            folder.mkdir(exist_ok=True)
            path = folder / f"lab-{c.name}.log"
            path.write_text(text)
            meta.update({"file": str(path.relative_to(HERE)), "torch": torch.__version__,
                         "python": sys.version.split()[0], "captured": datetime.date.today().isoformat(),
                         "seconds": round(time.monotonic() - t0, 1)})
            manifest[c.name] = meta
            MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            print(f"{c.name}: {len(text.splitlines())} lines -> {path.relative_to(HERE)} "
                  f"rc={meta['exit_codes']} ({meta['seconds']}s)", flush=True)
    finally:
        if _OOM_CG.exists():
            with contextlib.suppress(OSError):
                _OOM_CG.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())

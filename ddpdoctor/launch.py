"""What a launcher tells each process, mapped to torchrun's variables: the one launcher detection.

Used by `smoke` and `setup_ddp` (a process reading its own environment, detect()) and by `inspect`
(another process's /proc/<pid>/environ, probes/ranks.py, through RANK_VARS).

torchrun (torch/distributed/run.py) exports RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, and TORCHELASTIC_USE_AGENT_STORE=True when its agent hosts the store.
srun exports SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS / SLURM_NODEID and the step's node list;
Open MPI's mpirun exports OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; MPICH and Intel MPI
export PMI_RANK / PMI_SIZE (and MPI_LOCALRANKID / MPI_LOCALNRANKS). Explicit RANK/WORLD_SIZE win:
torchrun started under srun is still torchrun.
"""
from __future__ import annotations

import dataclasses
import re
import socket
from typing import Mapping

from ddpdoctor.validate import BadInput, validate_host, validate_port

DEFAULT_PORT = 29500  # torch.distributed's customary MASTER_PORT

# What each launcher exports in every process it starts: (rank, world size, local rank, local world
# size, launcher). torchrun: torch/distributed/elastic/agent/server/local_elastic_agent.py
# `_start_workers`; Open MPI: OMPI_COMM_WORLD_*; MPICH/Intel MPI: PMI_* and MPI_LOCAL*; srun:
# SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (the count per node comes from SLURM_STEP_TASKS_PER_NODE).
RANK_VARS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpi"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", "srun"),
)


@dataclasses.dataclass(frozen=True)
class RankEnv:
    launcher: str  # "torchrun" | "env" | "slurm" | "mpi" | "standalone"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    agent_store: bool = False  # torchrun's agent hosts the store: every rank is a client
    run_id: str = ""  # scopes our store keys (torchrun keeps one store across restarts)

    def worker_env(self) -> dict[str, str]:
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size), "LOCAL_RANK": str(self.local_rank),
                "LOCAL_WORLD_SIZE": str(self.local_world_size), "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port)}


def _int(env: Mapping[str, str], name: str) -> int:
    v = env.get(name, "")
    # ASCII digits only: int() also takes '٣', ' 3 ' and '1_0', and str.isdigit() takes '²' (which int() refuses)
    if not re.fullmatch(r"-?[0-9]{1,9}", v):
        raise BadInput(f"{name}={v!r} is not an integer")
    n = int(v)
    if n < 0:
        raise BadInput(f"{name}={n} is negative")
    return n


def first_host(nodelist: str) -> str:
    """First host of a Slurm host list: 'gpu[07-09,12],cpu1' -> 'gpu07', 'r[1-2]n[3-4]' -> 'r1n3'.

    Task 0 runs on the step's first node with every distribution Slurm offers. The expansion is
    python-hostlist's (ddpdoctor/hostlist.py), not a hand-written copy of Slurm's grammar.
    """
    from ddpdoctor import hostlist
    try:
        host = hostlist.first(nodelist)
    except BadInput:
        host = None
    if not host:
        raise BadInput(f"cannot read a host name from the Slurm node list {nodelist!r}")
    return host


def _tasks_on_node(spec: str, node_id: int) -> int | None:
    """SLURM_STEP_TASKS_PER_NODE '2(x3),1' -> [2, 2, 2, 1][node_id]."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts[node_id] if 0 <= node_id < len(counts) else None


def _master(env: Mapping[str, str], fallback: str | None, how: str) -> tuple[str, int]:
    addr = env.get("MASTER_ADDR") or fallback
    if not addr:
        raise BadInput(f"under {how}, export MASTER_ADDR (the host of rank 0), e.g. mpirun -x MASTER_ADDR=node1 ...")
    port = validate_port(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None
    return validate_host(addr), port if port is not None else DEFAULT_PORT


def detect(env: Mapping[str, str]) -> RankEnv | None:
    """The launcher this process runs under, or None when it was started by hand."""
    if "RANK" in env and "WORLD_SIZE" in env:
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not env.get(v)]
        if missing:
            raise BadInput(f"RANK and WORLD_SIZE are set but {' and '.join(missing)} not: "
                           "launch with torchrun, or export them for every rank")
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
        lws = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
        elastic = "TORCHELASTIC_RUN_ID" in env
        out = RankEnv("torchrun" if elastic else "env", rank, world, local, lws,
                      validate_host(env["MASTER_ADDR"]), validate_port(env["MASTER_PORT"]),
                      agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
                      run_id=f"{env.get('TORCHELASTIC_RUN_ID', '')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        # SLURM_STEP_ID tells an srun task from the batch script itself, which has SLURM_PROCID=0 too.
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        addr, port = _master(env, first_host(nodes) if nodes else None, "srun")
        if not env.get("MASTER_PORT") and re.fullmatch(r"[0-9]{1,12}", env.get("SLURM_JOB_ID", "")):
            port = DEFAULT_PORT + int(env["SLURM_JOB_ID"]) % 1000  # two jobs sharing a node need two ports
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
        local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
        node_id = _int(env, "SLURM_NODEID") if env.get("SLURM_NODEID") else 0
        lws = _tasks_on_node(per_node, node_id) if per_node else None
        step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", ""))
        out = RankEnv("slurm", rank, world, local, lws or 1, addr, port,
                      run_id=f"{env.get('SLURM_JOB_ID', '')}.{step}")
    elif "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
        ompi = "OMPI_COMM_WORLD_RANK" in env
        names = RANK_VARS[1 if ompi else 2][:4]
        addr, port = _master(env, None, "mpirun")
        rank, world = _int(env, names[0]), _int(env, names[1])
        local = _int(env, names[2]) if names[2] in env else 0
        lws = _int(env, names[3]) if names[3] in env else 1
        out = RankEnv("mpi", rank, world, local, lws, addr, port)
    else:
        return None
    if out.world_size < 1:
        raise BadInput(f"world size {out.world_size}: want at least 1 process")
    if out.rank >= out.world_size:
        raise BadInput(f"rank {out.rank} is outside a world of {out.world_size} (ranks are 0..{out.world_size - 1})")
    if out.local_rank >= max(out.local_world_size, 1) and out.launcher != "env":
        raise BadInput(f"local rank {out.local_rank} is outside the {out.local_world_size} processes of this node")
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel picks it), for a group we start ourselves."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class StepNode:
    """Where one task of an srun step sits, per node (`cluster` and `inspect --gather` run one per node)."""
    index: int                # this node's position in the step's node list (0 = the first node)
    names: tuple[str, ...]    # the step's nodes, in Slurm's order
    node: str                 # this node's Slurm name (SLURMD_NODENAME), else its hostname
    run_id: str               # "<job>.<step>": scopes store keys and protocol messages
    representative: bool      # False: another task on this node speaks for it


def srun_step(env: Mapping[str, str], hostname: str | None = None) -> StepNode | None:
    """This task's node in an srun step, None outside one. SLURM_STEP_NODELIST is set by srun for a
    step; a batch script has only SLURM_JOB_NODELIST (callers say "run it through srun")."""
    if not env.get("SLURM_STEP_NODELIST"):
        return None
    from ddpdoctor import hostlist

    names = tuple(hostlist.expand(env["SLURM_STEP_NODELIST"]))
    node = env.get("SLURMD_NODENAME") or hostname or socket.gethostname()
    if node in names:
        index = names.index(node)
    else:
        try:
            index = _int(env, "SLURM_NODEID")
        except BadInput:
            raise BadInput(f"this node ({node}) is not in the step's node list {env['SLURM_STEP_NODELIST']}") from None
        if index >= len(names):
            raise BadInput(f"SLURM_NODEID={index} is past the step's {len(names)} node(s)")
    return StepNode(index, names, node, f"{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', '0')}",
                    representative=env.get("SLURM_LOCALID", "0") in ("", "0"))

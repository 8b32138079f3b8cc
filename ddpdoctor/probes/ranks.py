"""Which process on this node is a rank, of which job, started by which launcher: the one owner of that answer.

`inspect`, `watch` and the GPU-memory mapping (NVML pid -> rank) all read it. From /proc alone
(probes/proctable.py): nothing is asked of the job. A rank is the process that runs the user's code,
not the launcher above it. What each launcher leaves in its workers' environment:

- torchrun / `python -m torch.distributed.run` (torch/distributed/elastic/agent/server/
  local_elastic_agent.py `_start_workers`): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
  ROLE_RANK, MASTER_ADDR/PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT (the generation: workers
  are restarted as a new generation with new pids), TORCHELASTIC_MAX_RESTARTS. The agent itself has none
  of them; under srun it has SLURM_PROCID (its task's number), which is NOT a torch rank.
- accelerate (accelerate/commands/launch.py `multi_gpu_launcher`): runs torch.distributed.run's agent
  in the `accelerate launch` process itself; workers are torchrun workers plus ACCELERATE_*.
- deepspeed (deepspeed/launcher/launch.py): `python -m deepspeed.launcher.launch` starts each worker
  with RANK, LOCAL_RANK, WORLD_SIZE, CROSS_RANK, CROSS_SIZE, LOCAL_SIZE (and `--local_rank=N`).
- srun starting python directly: SLURM_PROCID is the rank, SLURM_LOCALID the local rank.
- Open MPI's mpirun: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; MPICH / Intel MPI: PMI_RANK, PMI_SIZE.
- torch.multiprocessing.spawn (torch/multiprocessing/spawn.py `start_processes`): the rank is the
  first argument of the target function, passed through a pipe, never in the environment. The
  children are `python -c "from multiprocessing.spawn import spawn_main; ..." --multiprocessing-fork`,
  started in rank order (i = 0 .. nprocs-1, one after the other): their start order is the best
  guess, and is reported as a guess.
A variable set with `os.environ[...] = ...` after start is not in /proc/<pid>/environ.

Wrappers (`bash -c "python train.py"`, `sh`, `env`, `numactl`) inherit the rank's variables: of a chain
of processes claiming the same rank, the rank is the topmost Python process; the ones above are its
wrappers, the ones below (DataLoader workers, compile workers) its members.
"""
from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from ddpdoctor.launch import RANK_VARS  # the one table of what each launcher exports
from ddpdoctor.probes import proctable
from ddpdoctor.probes.proctable import Proc

_PY = re.compile(r"^(python|pypy)[\d.]*m?$")
SPAWN_ARG = "--multiprocessing-fork"


@dataclass(frozen=True)
class Rank:
    rank: int
    pid: int
    ppid: int
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    launcher: str           # torchrun | accelerate | deepspeed | srun | mpirun | mpi | mp.spawn | env
    source: str             # the variable the rank was read from, or "spawn order (guess)"
    job: str
    state: str
    cmdline: str
    env: Mapping[str, str] = field(default_factory=dict)
    generation: int | None = None         # TORCHELASTIC_RESTART_COUNT
    agent: int | None = None              # pid of the launcher process that started it
    wrappers: tuple[int, ...] = ()        # bash -c / sh / env between the launcher and the rank
    members: tuple[int, ...] = ()         # its own children that inherited its rank (DataLoader workers)
    exact: bool = True                    # False: the rank number is a guess (mp.spawn)

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class Agent:
    pid: int
    kind: str               # torchrun | accelerate | deepspeed | srun | mpirun | mp.spawn | parent
    cmdline: str
    ranks: tuple[int, ...]  # the ranks it started (rank numbers, this generation)
    restarts: int | None = None  # the generation its workers carry

    def to_dict(self) -> dict:
        return _plain(asdict(self))


@dataclass(frozen=True)
class Job:
    key: str
    launcher: str
    ranks: tuple[Rank, ...]
    agents: tuple[Agent, ...]
    world_size: int | None
    notes: tuple[str, ...] = ()
    previous: tuple[Rank, ...] = ()  # workers of an older generation still exiting (elastic restart)

    def pids(self) -> set[int]:
        out = {a.pid for a in self.agents}
        for r in self.ranks + self.previous:
            out |= {r.pid, *r.wrappers, *r.members}
        return out

    def to_dict(self) -> dict:
        return {"job": self.key, "launcher": self.launcher, "world_size": self.world_size,
                "agents": [a.to_dict() for a in self.agents],
                "ranks": [{k: v for k, v in r.to_dict().items() if k not in ("env", "cmdline")} for r in self.ranks],
                "previous_generation": [r.pid for r in self.previous], "notes": list(self.notes)}


@dataclass(frozen=True)
class Discovery:
    jobs: tuple[Job, ...]
    unreadable: int = 0   # processes whose environment we may not read (another user's, without root)

    def to_dict(self) -> dict:
        return {"jobs": [j.to_dict() for j in self.jobs], "unreadable": self.unreadable}


def _plain(d: dict) -> dict:
    """JSON's shapes: tuples as lists, mappings as dicts."""
    return {k: list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v for k, v in d.items()}


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _base(s: str) -> str:
    return os.path.basename(s)


def is_python(p: Proc) -> bool:
    names = [_base(p.exe)] if p.exe else []
    if p.argv:
        names.append(_base(p.argv[0]))
    return any(_PY.match(n) for n in names)


_SCRIPTS = {"torchrun": "torchrun", "accelerate": "accelerate", "accelerate-launch": "accelerate",
            "deepspeed": "deepspeed"}
_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
            "accelerate.commands.launch": "accelerate", "accelerate.commands.accelerate_cli": "accelerate",
            "deepspeed.launcher.launch": "deepspeed", "deepspeed.launcher.runner": "deepspeed"}
_MPI = ("mpirun", "mpiexec", "orterun", "prterun", "orted", "prted", "hydra_pmi_proxy")


def agent_kind(argv: tuple[str, ...]) -> str | None:
    """The launcher this process itself runs, or None. Python launchers are seen as `python /usr/bin/torchrun ...`
    or `python -m torch.distributed.run ...`; a wrapper that only names one (`timeout 60 torchrun ...`) is not one."""
    if not argv:
        return None
    head = _base(argv[0])
    if head in _MPI:
        return "mpirun"
    if head in ("srun", "slurmstepd") or argv[0].startswith("slurmstepd:"):
        return "srun"
    if head in _SCRIPTS:
        return _SCRIPTS[head]
    if not _PY.match(head):
        return None
    rest = list(argv[1:])
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest.pop(0)  # interpreter flags: -u, -B, -O ...
    if len(rest) > 1 and rest[0] == "-m":
        return _MODULES.get(rest[1])
    return _SCRIPTS.get(_base(rest[0])) if rest else None


def is_ddpdoctor(argv: tuple[str, ...]) -> bool:
    """ddpdoctor itself (an `inspect` or `watch` beside the job, started by srun --overlap): never a rank."""
    return any(a == "ddpdoctor" or _base(a) == "ddpdoctor" for a in argv[:4])


def claim(env: Mapping[str, str]) -> tuple[int, int | None, int | None, int | None, str] | None:
    """(rank, world size, local rank, local world size, source variable) a launcher left in the environment."""
    for rv, wv, lv, lwv, _launcher in RANK_VARS:
        rank = _int(env.get(rv))
        if rank is not None:
            return rank, _int(env.get(wv)), _int(env.get(lv)), _int(env.get(lwv)) if lwv else None, rv
    return None


def job_key(env: Mapping[str, str]) -> str:
    """What groups ranks into one job, the same string on every node of it."""
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '?')}"
    run = env.get("TORCHELASTIC_RUN_ID")
    if run and run != "none":  # "none" is torchrun's default --rdzv-id: two jobs may share it
        return f"torchelastic:{run}"
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"master:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    mpi = env.get("OMPI_MCA_orte_hnp_uri") or env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE")
    if mpi:
        return f"mpi:{mpi.split(';')[0]}"
    return ""


def launcher_name(env: Mapping[str, str], source: str, agent_argv: tuple[str, ...] = ()) -> str:
    """The launcher that started a rank, from its environment and the argv of the process above it."""
    kind = agent_kind(agent_argv) if agent_argv else None
    if source == "RANK":
        if kind in ("accelerate", "deepspeed") or any(k.startswith("ACCELERATE_") for k in env):
            return kind or "accelerate"
        if "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env or kind == "torchrun":
            return "torchrun"
        if "CROSS_RANK" in env:
            return "deepspeed"
        if "SLURM_PROCID" in env:
            return "srun"
        if "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env:
            return "mpirun"
        return "env"
    return {"OMPI_COMM_WORLD_RANK": "mpirun", "PMI_RANK": "mpi", "SLURM_PROCID": "srun"}.get(source, "env")


class _Tree:
    def __init__(self, procs: Mapping[int, Proc]):
        self.procs = procs
        self.kids: dict[int, list[int]] = {}
        for p in procs.values():
            self.kids.setdefault(p.ppid, []).append(p.pid)

    def up(self, pid: int) -> Iterable[Proc]:
        seen = set()
        p = self.procs.get(pid)
        while p is not None and p.ppid not in seen and p.ppid in self.procs:
            seen.add(p.ppid)
            p = self.procs[p.ppid]
            yield p

    def down(self, pid: int) -> Iterable[int]:
        """Descendants, nearest first (breadth first)."""
        queue = deque(self.kids.get(pid, ()))
        seen = set()
        while queue:
            c = queue.popleft()
            if c in seen:
                continue
            seen.add(c)
            yield c
            queue.extend(self.kids.get(c, ()))


def identify(procs: Mapping[int, Proc], exclude: Iterable[int] = ()) -> Discovery:
    """Jobs, their launchers and their ranks among `procs` (one /proc snapshot). Pure: tested on plain data."""
    excluded = set(exclude)
    tree = _Tree(procs)
    claims: dict[int, tuple] = {}
    unreadable = 0
    for p in procs.values():
        if p.pid in excluded or is_ddpdoctor(p.argv):
            continue
        if p.env is None:
            unreadable += bool(p.argv) and p.state not in ("Z", "X")  # kernel threads and zombies have none
            continue
        c = claim(p.env)
        if c is not None and agent_kind(p.argv) is None:
            claims[p.pid] = c
    # a process whose descendants claim a rank through a more specific variable launched them (srun -> torchrun)
    strength = {"RANK": 3, "OMPI_COMM_WORLD_RANK": 2, "PMI_RANK": 2, "SLURM_PROCID": 1}
    for pid in list(claims):
        mine = strength.get(claims[pid][4], 0)
        if any(strength.get(claims[d][4], 0) > mine for d in tree.down(pid) if d in claims):
            del claims[pid]
    # a chain claiming the same rank is one rank: its topmost Python process (wrappers above, members below)
    ranks: list[Rank] = []
    taken: set[int] = set()
    for pid in sorted(claims, key=lambda x: procs[x].start):
        if pid in taken:
            continue
        p, c = procs[pid], claims[pid]

        def same(q: Proc, c=c, key=job_key(p.env)) -> bool:  # claims the same rank of the same job
            return q.pid in claims and claims[q.pid][0] == c[0] and job_key(q.env or {}) == key
        top = pid
        for a in tree.up(pid):
            if not same(a):
                break
            top = a.pid
        chain = [top] + [d for d in tree.down(top) if d in claims and same(procs[d])]
        pythons = [x for x in chain if is_python(procs[x])]
        head = pythons[0] if pythons else chain[0]
        taken.update(chain)
        if c[4] != "RANK" and (not pythons or procs[head].torch is False):
            continue  # every srun / mpirun task has its rank variable: only a Python process with torch is a rank
        hp = procs[head]
        wrappers = tuple(x for x in chain if x != head and x in {a.pid for a in tree.up(head)})
        members = tuple(sorted(x for x in tree.down(head)))
        agent = _agent(tree, top, c[4])
        ranks.append(Rank(c[0], head, hp.ppid, c[2], c[1], c[3], launcher_name(hp.env or {}, c[4], agent.argv if agent else ()), c[4],
                          job_key(hp.env or {}), hp.state, hp.cmdline[:300], dict(hp.env or {}),
                          _int((hp.env or {}).get("TORCHELASTIC_RESTART_COUNT")),
                          agent.pid if agent else None, wrappers, members))
    ranks += _spawned(procs, tree, claims, excluded)
    return Discovery(_jobs(procs, tree, ranks), unreadable)


def _agent(tree: _Tree, pid: int, source: str) -> Proc | None:
    """The nearest launcher above a rank: a known launcher's argv, else the first process that claims no rank."""
    first = None
    for a in tree.up(pid):
        if agent_kind(a.argv):
            return a
        if first is None and a.env is not None and claim(a.env) is None:
            first = a
    return first


def _spawned(procs: Mapping[int, Proc], tree: _Tree, claims, excluded) -> list[Rank]:
    """torch.multiprocessing.spawn's children: no rank in the environment; numbered by start order (a guess)."""
    by_parent: dict[int, list[Proc]] = {}
    for p in procs.values():
        if SPAWN_ARG in p.argv and p.pid not in claims and p.pid not in excluded and p.env is not None:
            if any(a.pid in claims for a in tree.up(p.pid)):
                continue  # a rank's own spawned workers (DataLoader with the spawn context): members of that rank
            by_parent.setdefault(p.ppid, []).append(p)
    out = []
    for ppid, kids in by_parent.items():
        kids = [k for k in kids if k.torch is not False]
        env_hint = any(k.env and (k.env.get("MASTER_ADDR") or k.env.get("WORLD_SIZE")) for k in kids)
        if not kids or not (env_hint or any(k.tcp for k in kids)):
            continue  # a multiprocessing pool that never joined a process group is not a job
        kids.sort(key=lambda k: (k.start, k.pid))
        parent = procs.get(ppid)
        world = _int(next((k.env.get("WORLD_SIZE") for k in kids if k.env and k.env.get("WORLD_SIZE")), None))
        key = job_key(kids[0].env or {}) or f"spawn:{ppid}"
        for i, k in enumerate(kids):
            out.append(Rank(i, k.pid, k.ppid, i, world or len(kids), len(kids), "mp.spawn", "spawn order (guess)",
                            key, k.state, k.cmdline[:300], dict(k.env or {}), None, ppid if parent else None, (),
                            tuple(sorted(tree.down(k.pid))), exact=False))
    return out


def _jobs(procs: Mapping[int, Proc], tree: _Tree, ranks: list[Rank]) -> tuple[Job, ...]:
    groups: dict[str, list[Rank]] = {}
    for r in ranks:
        groups.setdefault(r.job or f"agent:{r.agent or r.ppid}", []).append(r)
    jobs = []
    for key, rs in groups.items():
        notes = []
        # an elastic restart leaves a new generation: older workers still here are exiting
        gens = {r.generation for r in rs if r.generation is not None}
        previous: list[Rank] = []
        if len(gens) > 1:
            newest = max(gens)
            previous = [r for r in rs if r.generation is not None and r.generation < newest]
            rs = [r for r in rs if r not in previous]
            notes.append(f"{len(previous)} worker(s) of an older generation still exiting (elastic restart)")
        gen = max(gens) if gens else None
        if gen:
            notes.append(f"restarted {gen} time(s) (TORCHELASTIC_RESTART_COUNT={gen}): ranks of generation {gen}")
        dup = [n for n in {r.rank for r in rs} if sum(r.rank == n for r in rs) > 1]
        if dup:
            notes.append(f"rank {','.join(map(str, sorted(dup)))} claimed by several processes: "
                         "two jobs share this key (same MASTER_ADDR:PORT or run id)")
        if any(not r.exact for r in rs):
            notes.append("mp.spawn passes the rank as an argument, not in the environment: ranks numbered "
                         "by start order (torch starts rank i before i+1), world size from the children found")
        agents = []
        for apid in sorted({r.agent for r in rs if r.agent is not None}):
            a = procs.get(apid)
            mine = tuple(sorted(r.rank for r in rs if r.agent == apid))
            kind = agent_kind(a.argv) if a else None
            if kind is None:
                kind = "mp.spawn" if any(not r.exact and r.agent == apid for r in rs) else "parent"
            agents.append(Agent(apid, kind, a.cmdline[:300] if a else "", mine,
                                max((r.generation for r in rs if r.agent == apid and r.generation is not None),
                                    default=None)))
        worlds = [r.world_size for r in rs if r.world_size]
        world = max(set(worlds), key=worlds.count) if worlds else None
        launchers = [r.launcher for r in rs]
        jobs.append(Job(key, max(set(launchers), key=launchers.count), tuple(sorted(rs, key=lambda r: (r.rank, r.pid))),
                        tuple(agents), world, tuple(notes), tuple(previous)))
    jobs += _idle_agents(procs, tree, ranks)
    return tuple(sorted(jobs, key=lambda j: (-len(j.ranks), j.key)))


def _idle_agents(procs: Mapping[int, Proc], tree: _Tree, ranks: list[Rank]) -> list[Job]:
    """torchrun-family agents with no live worker: between two generations of an elastic restart, or done."""
    busy = {r.agent for r in ranks}
    out = []
    for p in procs.values():
        kind = agent_kind(p.argv)
        if kind not in ("torchrun", "accelerate", "deepspeed") or p.pid in busy or is_ddpdoctor(p.argv):
            continue
        if any(agent_kind(a.argv) == kind for a in tree.up(p.pid)):
            continue  # `deepspeed` runner above `deepspeed.launcher.launch`: one launcher
        if any(d in busy for d in tree.down(p.pid)):
            continue
        key = job_key(p.env or {}) or f"agent:{p.pid}"
        out.append(Job(key, kind, (), (Agent(p.pid, kind, p.cmdline[:300], ()),), None,
                       (f"{kind} (pid {p.pid}) has no live worker: restarting them, or the job is ending",)))
    return out


def discover(exclude: Iterable[int] = (), root: str = "/proc") -> Discovery:
    """Read /proc once and identify the jobs; processes in `exclude` (ddpdoctor and its ancestors) are skipped."""
    procs = proctable.snapshot(root)
    excluded = set(exclude)
    # the expensive facts only where the environment does not say: spawn children, srun/mpi-only tasks
    for pid, p in list(procs.items()):
        if p.env is None or pid in excluded:
            continue
        c = claim(p.env)
        if SPAWN_ARG in p.argv or (c is not None and c[4] != "RANK" and is_python(p)):
            procs[pid] = _with(p, torch=proctable.has_torch(pid, root),
                               tcp=proctable.has_tcp(pid, root) if SPAWN_ARG in p.argv else None)
    return identify(procs, excluded)


def _with(p: Proc, **kw) -> Proc:
    from dataclasses import replace
    return replace(p, **kw)


def owner(disc_or_job, pid: int) -> Rank | None:
    """The rank a pid belongs to: the rank itself, or one of its members (an NVML pid may be a DataLoader worker)."""
    jobs = disc_or_job.jobs if isinstance(disc_or_job, Discovery) else (disc_or_job,)
    for j in jobs:
        for r in j.ranks:
            if pid == r.pid or pid in r.members:
                return r
    return None

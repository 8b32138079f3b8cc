"""A real Slurm on top of the network lab (tests/lab.py): munge, slurmctld, one slurmd per node.

    with SlurmLab(lab) as slurm:                   # lab = Lab(["head", "node1", "node2"])
        slurm.set_prolog([*DD, "prolog", "--drain"])
        r = slurm.srun("-N", "2", "hostname")
        slurm.nodes()                              # {"node1": ("idle", ""), "node2": ("drained", "ddpdoctor: ...")}

Layout (Debian's slurm-wlm 22.05 packages, nothing installed or changed on the host):

* everything lives in one private directory ``/tmp/ddpdoctor-slurm-<lab id>-*``: slurm.conf (and
  an empty plugstack.conf, cgroup.conf), a fresh munge key and socket, state and spool
  directories (``%n`` per node), logs, and the Prolog / TaskProlog scripts;
* ``munged`` and ``slurmctld`` run inside the lab node ``head``, one ``slurmd -D -N <node>`` inside
  every compute node (its own network namespace, hostname and /etc/hosts), so each slurmd has its
  own address and ports, as on a real cluster. munge's socket is a file, reached from every node;
* ``proctrack/linuxproc``, ``task/none`` and ``SlurmdParameters=config_overrides`` (every node
  declares CPUs=1 whatever the host has): no cgroups are needed or touched;
* ``gpus=N`` declares N gres GPUs per node (gres.conf over fake device files): Slurm allocates them
  and names them in the Prolog's SLURM_JOB_GPUS; NVML itself is tests/fakes/pynvml.py;
* ``pid_ns=True`` starts each slurmd under ``unshare --pid --fork --mount-proc``: the tasks of a
  node see only that node's processes in /proc, as on separate machines (for ``inspect --gather``);
* ``Prolog=`` and ``TaskProlog=`` always point at two scripts that do nothing until a test
  writes them (``set_prolog`` / ``set_task_prolog``): slurmd reads the script again on every job,
  so a test switches hooks without reconfiguring Slurm.

Teardown kills every process of every node (the lab does it too, even when the test process
dies: its holders kill their namespaces' processes) and removes the directory; a directory whose
owner died is removed by the next SlurmLab.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from lab import Lab, LabError, LabUnavailable, REPO_ROOT, _pid_alive, _proc_start_time

TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol")
DIR_PREFIX = "ddpdoctor-slurm-"
DD = [sys.executable, "-m", "ddpdoctor"]
NOOP_SCRIPT = "#!/bin/sh\n# no hook installed by the test\nexit 0\n"


class SlurmUnavailable(LabUnavailable):
    """This machine has no Slurm / munge to run."""


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")


def slurm_available() -> tuple[bool, str]:
    missing = [t for t in TOOLS if not _which(t)]
    if missing:
        return False, f"Slurm/munge programs not found: {', '.join(missing)} (apt-get install slurmctld slurmd munge slurm-client)"
    return True, ""


def cleanup_stale(tmp: str = tempfile.gettempdir()) -> list[str]:
    """Remove directories of SlurmLabs whose owner process is gone."""
    removed = []
    for d in Path(tmp).glob(f"{DIR_PREFIX}*"):
        try:
            owner = json.loads((d / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        if owner and _pid_alive(int(owner.get("pid", 0)), owner.get("start")):
            continue
        if not owner and time.time() - d.stat().st_mtime < 60:
            continue  # being created right now
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed


def hook_script(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """A Prolog/TaskProlog script: `exec [env K=V ...] argv` (Slurm runs it with no PATH and no args)."""
    pre = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
    return "#!/bin/sh\nexec " + " ".join(shlex.quote(str(a)) for a in [*pre, *argv]) + "\n"


class SlurmLab:
    def __init__(self, lab: Lab, *, head: str = "head", computes: Sequence[str] | None = None,
                 prolog_flags: str = "", conf_extra: str = "", gpus: int = 0, start_timeout: float = 30.0,
                 pid_ns: bool = False, cpus: int = 1):
        ok, why = slurm_available()
        if not ok:
            raise SlurmUnavailable(why)
        self.lab = lab
        self.head = head
        self.computes = list(computes) if computes is not None else [n for n in lab.names if n != head]
        self._procs: list[subprocess.Popen] = []
        self.cpus = cpus  # CPUs each node declares (tasks per node a job may ask for)
        self.pid_ns = pid_ns  # each slurmd in a pid namespace of its own: a node sees only its own processes
        self._closed = False
        cleanup_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{lab.id}-"))
        (self.dir / "owner.json").write_text(json.dumps({"pid": os.getpid(), "start": _proc_start_time(os.getpid())}))
        try:
            self._write_config(prolog_flags, conf_extra, gpus)
            self._start(start_timeout)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ setup
    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client command needs (SLURM_CONF); given to every command run through this lab."""
        return {"SLURM_CONF": str(self.conf)}

    def _write_config(self, prolog_flags: str, conf_extra: str, gpus: int) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self.prolog_path = d / "prolog.sh"
        self.task_prolog_path = d / "task_prolog.sh"
        for p in (self.prolog_path, self.task_prolog_path):
            p.write_text(NOOP_SCRIPT)
            p.chmod(0o755)
        (d / "plugstack.conf").write_text("")
        (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        gres = ""
        if gpus:
            # `gpus` GPUs per node as gres: Slurm hands them out and names them in SLURM_JOB_GPUS. The
            # files are character devices with NVIDIA's major number that nothing ever opens
            # (task/none constrains no devices); the GPUs themselves come from tests/fakes/pynvml.py.
            (d / "dev").mkdir()
            for i in range(gpus):
                os.mknod(d / "dev" / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(195, i))
            (d / "gres.conf").write_text(f"Name=gpu File={d / 'dev'}/nvidia[0-{gpus - 1}]\n")
            gres = f" Gres=gpu:{gpus}"
            conf_extra = f"GresTypes=gpu\n{conf_extra}"
        nodes = "\n".join(f"NodeName={n} NodeAddr={self.lab.addr(n)} CPUs={self.cpus} RealMemory=100{gres} State=UNKNOWN"
                          for n in self.computes)
        self.conf.write_text(f"""# written by tests/slurmlab.py for lab {self.lab.id}
ClusterName=lab{self.lab.id}
SlurmctldHost={self.head}({self.lab.addr(self.head)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d / 'munge.socket'}
CredType=cred/munge
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'spool'}/slurmd-%n.pid
SlurmctldLogFile={d / 'log'}/slurmctld.log
SlurmdLogFile={d / 'log'}/slurmd-%n.log
PlugStackConfig={d / 'plugstack.conf'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=2
MinJobAge=2
Prolog={self.prolog_path}
TaskProlog={self.task_prolog_path}
{f'PrologFlags={prolog_flags}' if prolog_flags else ''}
{conf_extra}
{nodes}
PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _popen(self, node: str, argv: Sequence[str], log: str) -> subprocess.Popen:
        f = open(self.dir / "log" / log, "w")
        try:
            p = self.lab.popen(node, argv, env=self.env, stdout=f, stderr=subprocess.STDOUT, cwd="/")
        finally:
            f.close()
        self._procs.append(p)
        return p

    def _start(self, timeout: float) -> None:
        d = self.dir
        sock = d / "munge.socket"
        munged = self._popen(self.head, [_which("munged"), "-F", "--force", f"--socket={sock}", f"--key-file={d / 'munge.key'}",
                                         f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'log' / 'munged.log'}",
                                         f"--seed-file={d / 'munged.seed'}"], "munged.out")
        self._wait(lambda: sock.exists(), 10, "munged did not create its socket", munged)
        ctl = self._popen(self.head, [_which("slurmctld"), "-D", "-c", "-f", str(self.conf)], "slurmctld.out")
        self._wait(lambda: self._ctld_up(), 15, "slurmctld did not answer", ctl)
        for n in self.computes:
            argv = [_which("slurmd"), "-D", "-N", n, "-f", str(self.conf)]
            if self.pid_ns:  # --mount-proc: /proc shows that namespace only (what `inspect` reads)
                argv = [_which("unshare") or "unshare", "--pid", "--fork", "--mount-proc", *argv]
            self._popen(n, argv, f"slurmd-{n}.out")
        self.wait_idle(self.computes, timeout)

    def _ctld_up(self) -> bool:
        r = self.lab.run(self.head, ["scontrol", "ping"], env=self.env, timeout=10)
        return "UP" in r.stdout

    def _wait(self, cond, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.1)
        raise LabError(f"{what}\n{self.logs()}")

    # ------------------------------------------------------------------ hooks
    def set_prolog(self, argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> None:
        """Make Prolog= run `argv` (None: do nothing). slurmd reads the script on every job."""
        self._write_hook(self.prolog_path, argv, env)

    def set_task_prolog(self, argv: Sequence[str] | None, env: Mapping[str, str] | None = None) -> None:
        self._write_hook(self.task_prolog_path, argv, env)

    @staticmethod
    def _write_hook(path: Path, argv, env) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(hook_script(argv, env) if argv else NOOP_SCRIPT)
        tmp.chmod(0o755)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ commands
    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, timeout: float = 60,
            node: str | None = None) -> subprocess.CompletedProcess:
        """Run a command (srun, sinfo, ...) on the head node (or `node`) with SLURM_CONF set."""
        return self.lab.run(node or self.head, list(argv), env={**self.env, **(env or {})}, timeout=timeout)

    def srun(self, *args: str, env: Mapping[str, str | None] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.run(["srun", *args], env=env, timeout=timeout)

    def nodes(self) -> dict[str, tuple[str, str]]:
        """{node: (state, reason)} as sinfo reports them (state e.g. idle, drained, draining, completing)."""
        r = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], timeout=15)
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split("|", 2)
            if len(parts) == 3:
                out[parts[0]] = (parts[1], "" if parts[2] == "none" else parts[2])
        return out

    def wait_idle(self, nodes: Sequence[str], timeout: float = 20) -> None:
        self._wait(lambda: all(self.nodes().get(n, ("",))[0] == "idle" for n in nodes), timeout,
                   f"nodes {', '.join(nodes)} did not become idle: {self.nodes() if not self._closed else ''}")

    def wait_state(self, node: str, state: str, timeout: float = 20) -> tuple[str, str]:
        """Wait until sinfo shows `node` in `state` (a node passes through `completing` first); (state, reason)."""
        self._wait(lambda: self.nodes().get(node, ("",))[0] == state, timeout,
                   f"node {node} did not become {state}: {self.nodes() if not self._closed else ''}")
        return self.nodes()[node]

    def resume(self, node: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=15)

    def logs(self, tail: int = 2000) -> str:
        parts = []
        for f in sorted((self.dir / "log").glob("*")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {f.name}\n{f.read_text()[-tail:]}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors = []
        for n in [*self.computes, self.head]:
            try:
                self.lab.kill_all(n)  # slurmd, slurmstepd, tasks, prologs, munged, slurmctld: all of the node
            except LabError as e:
                errors.append(str(e))
        for p in self._procs:
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise LabError("slurm teardown incomplete:\n" + "\n".join(errors))

    def __enter__(self) -> "SlurmLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["SlurmLab", "SlurmUnavailable", "slurm_available", "hook_script", "cleanup_stale", "DD", "REPO_ROOT"]


def start_or_skip(lab, **kw) -> "SlurmLab":
    """A SlurmLab on `lab`; without Slurm the test skips (fails under DDPDOCTOR_REQUIRE_LAB=1)."""
    import pytest

    try:
        return SlurmLab(lab, **kw)
    except SlurmUnavailable as e:
        if os.environ.get("DDPDOCTOR_REQUIRE_LAB") == "1":
            pytest.fail(f"DDPDOCTOR_REQUIRE_LAB=1 but Slurm is unavailable: {e}", pytrace=False)
        pytest.skip(str(e))

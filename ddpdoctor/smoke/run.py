"""One `smoke` run from this process's side: start the ranks (standalone: all of them here; under a
launcher: this rank's worker), wait for them through the supervisor, re-run once with `--fix` when rank 0
asks for it. No torch here (the workers import it), no judgement (smoke/report.py), no printing but the
lines a rank other than 0 says about itself, through `say`.

    standalone (`--nproc N`)      one Supervisor, N workers, rank 0's world report comes back here
    under torchrun/srun/mpirun    one Supervisor per rank; rank 0 reports for the world, the others
                                  exit quietly (or say why they could not take part)
"""
from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Callable, Mapping

from ddpdoctor.smoke.budget import REPORT_MARGIN_S
from ddpdoctor.smoke.plan import SmokeConfig

# What the launcher told this process; the workers get their own values (RankEnv.worker_env).
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "GROUP_RANK", "ROLE_RANK", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE")


@dataclasses.dataclass
class SmokeRun:
    """What the ranks did: the outcome of the run (and of the --fix re-run), and how it ended here."""

    launcher: str
    started: float                 # time.monotonic() when the run began
    outcome: object = None         # smoke.supervise.Outcome
    fix_outcome: object = None     # the --fix re-run's Outcome, when one ran
    interrupted: bool = False      # SIGINT: the command exits 130 without a report
    exit_code: int | None = None   # a rank other than 0 under a launcher: exit with this, no report
    master: str | None = None
    port: int | None = None

    @property
    def world(self) -> Mapping:
        return (self.outcome.world if self.outcome is not None else None) or {"records": {}, "world_size": 0}

    @property
    def fix_world(self) -> Mapping | None:
        return self.fix_outcome.world if self.fix_outcome else None

    def logs_of_failed(self) -> dict[int, list[str]]:
        """The last lines of each worker that did not finish (and was not stopped by rank 0's watchdog)."""
        return {r: w.log_tail() for r, w in self.outcome.workers.items() if not w.finished and w.aborted is None}


def torch_missing() -> str:
    """'' when torch can be found by this Python (without importing it: that takes seconds)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as e:
        return str(e)
    return "" if spec is not None else "No module named 'torch'"


def run(cfg: SmokeConfig, nproc: int, rank_env, *, say: Callable[[str], None]) -> SmokeRun:
    """Standalone (`rank_env` None: `nproc` local ranks) or this rank under a launcher."""
    if rank_env is None:
        return _standalone(cfg, nproc)
    return _under_launcher(cfg, rank_env, say)


def _worker_env(cfg: SmokeConfig, rank_env, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(rank_env.worker_env())
    env.update(DDPDOCTOR_SMOKE_CONFIG=cfg.to_json(), DDPDOCTOR_SMOKE_PREFIX=prefix,
               DDPDOCTOR_SMOKE_AGENT_STORE="1" if rank_env.agent_store else "0",
               DDPDOCTOR_SMOKE_LAUNCHER=rank_env.launcher, DDPDOCTOR_SMOKE_WORKER="1")
    return env


def _fix_round(cfg: SmokeConfig) -> SmokeConfig:
    return dataclasses.replace(cfg, fix_round=True)


def _wants_fix(outcome) -> bool:
    return bool(outcome.world and outcome.world.get("rerun_fix"))


def _run_standalone(cfg: SmokeConfig, n: int):
    from ddpdoctor.launch import RankEnv, free_port
    from ddpdoctor.smoke.supervise import Supervisor, WorkerProc, become_subreaper
    become_subreaper()  # a preamble's daemons must not outlive the run
    port = free_port()
    prefix = f"ddpdoctor/r{2 if cfg.fix_round else 1}"
    workers = [WorkerProc(r, _worker_env(cfg, RankEnv("standalone", r, n, r, n, "127.0.0.1", port), prefix))
               for r in range(n)]
    return Supervisor(cfg, workers, n, standalone=True).run()


def _standalone(cfg: SmokeConfig, n: int) -> SmokeRun:
    out = SmokeRun("standalone", time.monotonic())
    out.outcome = _run_standalone(cfg, n)
    if out.outcome.signalled == "SIGINT":
        out.interrupted = True
        return out
    if _wants_fix(out.outcome):
        out.fix_outcome = _run_standalone(_fix_round(cfg), n)
        out.interrupted = out.fix_outcome.signalled == "SIGINT"
    return out


def _run_rank(cfg: SmokeConfig, rank_env):
    from ddpdoctor.smoke.supervise import Supervisor, WorkerProc, become_subreaper
    become_subreaper()
    prefix = f"ddpdoctor/{rank_env.run_id or 'job'}/r{2 if cfg.fix_round else 1}"
    w = WorkerProc(rank_env.rank, _worker_env(cfg, rank_env, prefix))
    return Supervisor(cfg, [w], rank_env.world_size, standalone=False).run()


def _under_launcher(cfg: SmokeConfig, rank_env, say: Callable[[str], None]) -> SmokeRun:
    out = SmokeRun(rank_env.launcher, time.monotonic(), master=rank_env.master_addr, port=rank_env.master_port)
    out.outcome = _run_rank(cfg, rank_env)
    if out.outcome.signalled == "SIGINT":
        out.interrupted = True
        return out
    if rank_env.rank != 0:
        out.exit_code = _other_rank(cfg, rank_env, out.outcome, say)
        return out
    if _wants_fix(out.outcome) and not out.outcome.signalled:
        out.fix_outcome = _run_rank(_fix_round(cfg), rank_env)
    return out


def after_report(run: SmokeRun, *, say: Callable[[str], None]) -> None:
    """Rank 0 under a launcher, once its verdict is out (printed or not): end this run's SIGSTOPped local
    ranks (and their workers), so that the launcher need not wait its 30 s SIGTERM grace for them."""
    if run.launcher == "standalone" or run.exit_code is not None:
        return
    from ddpdoctor.smoke.siblings import end_stopped_local_ranks
    end_stopped_local_ranks(before=lambda pid, rank: say(
        f"ddpdoctor smoke: ending stopped rank {rank} (pid {pid}) after the verdict, so that {run.launcher} need "
        "not wait for it"))


def _other_rank(cfg: SmokeConfig, rank_env, outcome, say: Callable[[str], None]) -> int:
    """A rank other than 0 stays quiet when all went well: rank 0 reports for the world. When its
    worker could not finish, it says why (its own lines), then holds its launcher slot open so that
    rank 0 can name it. Returns the exit code."""
    from ddpdoctor.smoke.supervise import hold_slot
    w = outcome.workers[rank_env.rank]
    me = f"ddpdoctor smoke: rank {rank_env.rank} ({socket.gethostname()})"
    if w.finished and not outcome.signalled:
        if w.done and w.done.get("rerun_fix"):
            again = _run_rank(_fix_round(cfg), rank_env)
            w = again.workers[rank_env.rank]
        if cfg.verbose:
            say(f"{me}: done, results sent to rank 0")
        return 0 if w.finished else 1
    if w.aborted is not None:
        if w.aborted.get("kind") == "no report from rank 0":
            say(f"{me}: gave up waiting for rank 0's report after --timeout + {REPORT_MARGIN_S:g} s")
        else:
            say(f"{me}: stopped by rank 0's watchdog ({w.aborted.get('kind')}); rank 0's report names the cause")
        return 1
    why = (w.lost_store and f"lost the rendezvous store at {rank_env.master_addr}:{rank_env.master_port}"
           f" ({w.lost_store.get('error')})") or w.killed or w.exit or "ended"
    say(f"{me}: worker pid {w.proc.pid if w.proc else '?'} in phase '{w.phase}': {why}")
    err = (w.record or {}).get("error")
    if err:
        say(f"{me}: {err.get('message')}" + (f" — {err['hint']}" if err.get("hint") else ""))
    for line in w.log_tail(8):
        say(f"  | {line}")
    if not outcome.signalled:
        hold_slot(cfg, time.monotonic(), lambda: False)
    return 1

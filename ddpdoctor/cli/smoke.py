"""`ddpdoctor smoke`: a torch.distributed smoke test run exactly the way training runs.

This module never imports torch (`ddpdoctor --help` must stay fast): torch lives in the worker
processes (ddpdoctor/smoke/worker.py) that the supervisor starts.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time

import click

from ddpdoctor.cli.common import FINITE
from ddpdoctor.validate import BadInput, validate_seconds

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "ROLE_RANK", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE")


@click.command("smoke")
@click.option("--nproc", type=click.IntRange(1, 512), metavar="N",
              help="Start N local ranks here (standalone). Default without a launcher: 2.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto", show_default=True,
              help="auto: NCCL when every rank has a GPU, else Gloo.")
@click.option("--timeout", type=FINITE, default=30.0, show_default=True,
              help="Seconds a rank may spend in one phase before it is named as stuck.")
@click.option("--max-size", default="64M", show_default=True, metavar="SIZE",
              help="Largest message for correctness and bandwidth (e.g. 4K, 1M, 64M).")
@click.option("--quick", is_flag=True, help="One small size, correctness only.")
@click.option("--expect-busbw", type=FINITE, metavar="GB/s", help="Warn when the peak all_reduce bus bandwidth is lower.")
@click.option("--fix", is_flag=True,
              help="When a rank holds memory on another GPU, re-run with set_device/device_id/empty_cache and compare.")
@click.option("--preamble", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="A Python file every rank runs before init_process_group (your script's set-up code).")
@click.option("--json", "json_out", is_flag=True, help="Print only the JSON report on stdout (rank 0).")
@click.option("--select", "select", multiple=True, metavar="PREFIX", help="Run only checks whose id starts with PREFIX.")
@click.option("--ignore", "ignore", multiple=True, metavar="PREFIX", help="Skip checks whose id starts with PREFIX.")
@click.option("--fail-on", type=click.Choice(["error", "warning"], case_sensitive=False), default="error",
              show_default=True, help="Lowest severity that makes the exit code 1.")
@click.option("-v", "--verbose", is_flag=True, help="Informational findings in full; other ranks print a line each.")
def smoke(nproc, backend, timeout, max_size, quick, expect_busbw, fix, preamble, json_out, select, ignore,
          fail_on, verbose):
    """All-reduce/broadcast/barrier smoke test that names hung ranks and misplaced GPU memory.

    \b
    ddpdoctor smoke --nproc 2                             standalone: 2 local ranks
    torchrun --nnodes=2 --nproc-per-node=4 ... -m ddpdoctor smoke
    srun -N 2 --ntasks-per-node=4 ddpdoctor smoke         (or mpirun -x MASTER_ADDR=node1 ...)

    Rank 0 prints one report for the whole world; exit code 1 when a rank hangs, dies, or
    computes a wrong result.
    """
    from ddpdoctor import launch
    from ddpdoctor.smoke.plan import TORCH_INSTALL, SmokeConfig, parse_size

    missing = torch_missing()
    if missing:  # before starting ranks that would all die in their first line
        raise BadInput(f"torch is not installed for {sys.executable} ({missing}): {TORCH_INSTALL}")

    timeout = validate_seconds(timeout, "--timeout", minimum=1, maximum=3600)
    try:
        size = parse_size(max_size)
    except ValueError as e:
        raise BadInput(f"--max-size: {e}") from None
    if not 4 <= size <= 8 << 30:
        raise BadInput(f"--max-size {max_size}: want 4 bytes to 8G")
    if expect_busbw is not None and expect_busbw <= 0:
        raise BadInput(f"--expect-busbw {expect_busbw:g}: want a positive GB/s")
    cfg = SmokeConfig(timeout=timeout, max_size=size, quick=quick, backend=backend, expect_busbw=expect_busbw,
                      fix=fix, preamble=os.path.abspath(preamble) if preamble else None, verbose=verbose)
    rank_env = launch.detect(os.environ)
    if rank_env is not None and nproc is not None:
        raise BadInput(f"--nproc starts a local group of its own; under {rank_env.launcher} the launcher "
                       "starts the ranks: leave --nproc out")
    opts = dict(json_out=json_out, select=select, ignore=ignore, fail_on_warning=fail_on.lower() == "warning",
                verbose=verbose)
    if rank_env is None:
        _standalone(cfg, nproc or 2, **opts)
    else:
        _under_launcher(cfg, rank_env, **opts)


def torch_missing() -> str:
    """'' when torch can be found by this Python (without importing it: that takes seconds)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as e:
        return str(e)
    return "" if spec is not None else "No module named 'torch'"


def _worker_env(cfg, rank_env, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.update(rank_env.worker_env())
    env.update(DDPDOCTOR_SMOKE_CONFIG=cfg.to_json(), DDPDOCTOR_SMOKE_PREFIX=prefix,
               DDPDOCTOR_SMOKE_AGENT_STORE="1" if rank_env.agent_store else "0",
               DDPDOCTOR_SMOKE_LAUNCHER=rank_env.launcher, DDPDOCTOR_SMOKE_WORKER="1")
    return env


def _run_standalone(cfg, n: int):
    from ddpdoctor.launch import RankEnv, free_port
    from ddpdoctor.smoke.supervise import Supervisor, WorkerProc, become_subreaper
    become_subreaper()  # a preamble's daemons must not outlive the run
    port = free_port()
    prefix = f"ddpdoctor/r{2 if cfg.fix_round else 1}"
    workers = [WorkerProc(r, _worker_env(cfg, RankEnv("standalone", r, n, r, n, "127.0.0.1", port), prefix))
               for r in range(n)]
    return Supervisor(cfg, workers, n, standalone=True).run()


def _logs_of_failed(outcome) -> dict[int, list[str]]:
    return {r: w.log_tail() for r, w in outcome.workers.items() if not w.finished and w.aborted is None}


def _interrupted(outcome) -> None:
    if outcome.signalled == "SIGINT":
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(130)


def _finish(cfg, outcome, fix_outcome, *, launcher, json_out, select, ignore, fail_on_warning, verbose,
            t0, master=None, port=None) -> None:
    from ddpdoctor.cli.common import emit
    from ddpdoctor.smoke.report import build_report
    logs = _logs_of_failed(outcome)
    report = build_report(outcome.world or {"records": {}, "world_size": 0}, cfg, launcher=launcher, select=select,
                          ignore=ignore, fail_on_warning=fail_on_warning,
                          fix_world=fix_outcome.world if fix_outcome else None, env=os.environ,
                          master=master, port=port, logs=logs, duration_s=time.monotonic() - t0)
    emit(report, json_out=json_out, verbose=verbose)


def _standalone(cfg, n: int, **opts) -> None:
    t0 = time.monotonic()
    outcome = _run_standalone(cfg, n)
    _interrupted(outcome)
    fix_outcome = None
    if outcome.world and outcome.world.get("rerun_fix"):
        fix_outcome = _run_standalone(dataclasses.replace(cfg, fix_round=True), n)
        _interrupted(fix_outcome)
    _finish(cfg, outcome, fix_outcome, launcher="standalone", t0=t0, **opts)


def _run_rank(cfg, rank_env):
    from ddpdoctor.smoke.supervise import Supervisor, WorkerProc, become_subreaper
    become_subreaper()
    prefix = f"ddpdoctor/{rank_env.run_id or 'job'}/r{2 if cfg.fix_round else 1}"
    w = WorkerProc(rank_env.rank, _worker_env(cfg, rank_env, prefix))
    return Supervisor(cfg, [w], rank_env.world_size, standalone=False).run()


def _under_launcher(cfg, rank_env, **opts) -> None:
    t0 = time.monotonic()
    outcome = _run_rank(cfg, rank_env)
    _interrupted(outcome)
    if rank_env.rank != 0:
        _other_rank_exit(cfg, rank_env, outcome, opts["verbose"])
    fix_outcome = None
    if outcome.world and outcome.world.get("rerun_fix") and not outcome.signalled:
        fix_outcome = _run_rank(dataclasses.replace(cfg, fix_round=True), rank_env)
    try:
        _finish(cfg, outcome, fix_outcome, launcher=rank_env.launcher, t0=t0, master=rank_env.master_addr,
                port=rank_env.master_port, **opts)
    finally:  # the verdict is out: a stopped local rank would hold the launcher's 30 s SIGTERM grace
        from ddpdoctor.smoke.siblings import end_stopped_local_ranks
        for pid, rank in end_stopped_local_ranks():
            click.echo(f"ddpdoctor smoke: ended stopped rank {rank} (pid {pid}) after the verdict, so that "
                       f"{rank_env.launcher} need not wait for it", err=True)


def _other_rank_exit(cfg, rank_env, outcome, verbose: bool) -> None:
    """A rank other than 0 stays quiet when all went well: rank 0 reports for the world."""
    from ddpdoctor.smoke.supervise import hold_slot
    w = outcome.workers[rank_env.rank]
    me = f"ddpdoctor smoke: rank {rank_env.rank} ({socket.gethostname()})"
    if w.finished and not outcome.signalled:
        if w.done and w.done.get("rerun_fix"):
            again = _run_rank(dataclasses.replace(cfg, fix_round=True), rank_env)
            w = again.workers[rank_env.rank]
        if verbose:
            click.echo(f"{me}: done, results sent to rank 0", err=True)
        sys.exit(0 if w.finished else 1)
    if w.aborted is not None:
        if w.aborted.get("kind") == "no report from rank 0":
            click.echo(f"{me}: gave up waiting for rank 0's report after --timeout + 10 s", err=True)
        else:
            click.echo(f"{me}: stopped by rank 0's watchdog ({w.aborted.get('kind')}); rank 0's report names the cause",
                       err=True)
        sys.exit(1)
    why = (w.lost_store and f"lost the rendezvous store at {rank_env.master_addr}:{rank_env.master_port}"
           f" ({w.lost_store.get('error')})") or w.killed or w.exit or "ended"
    click.echo(f"{me}: worker pid {w.proc.pid if w.proc else '?'} in phase '{w.phase}': {why}", err=True)
    err = (w.record or {}).get("error")
    if err:
        click.echo(f"{me}: {err.get('message')}" + (f" — {err['hint']}" if err.get("hint") else ""), err=True)
    for line in w.log_tail(8):
        click.echo(f"  | {line}", err=True)
    if not outcome.signalled:
        hold_slot(cfg, time.monotonic(), lambda: False)
    sys.exit(1)

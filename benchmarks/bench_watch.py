"""`ddpdoctor watch` measured on REAL torchrun + Gloo training loops (tests/watch_jobs/train.py).

    python3 benchmarks/bench_watch.py faults [--seeds 3] [--kinds sleep,stop,other,loader,kill,slow1.6,lag0.1,cap0.5]
    python3 benchmarks/bench_watch.py faults --kinds lag0.05,lag0.1,lag0.2,lag0.4   the smallest lag named reliably
    python3 benchmarks/bench_watch.py healthy [--seconds 600] [--nproc 2]    false events per hour, cost, memory
    python3 benchmarks/bench_watch.py faults --job ddp --kinds lag0.2   the same on a DistributedDataParallel job
    python3 benchmarks/bench_watch.py faults|healthy --debug-server ...   the job runs torch's debug server
                                                                         (watch reads its sequence numbers)
    python3 benchmarks/bench_watch.py seqcost [--entries 2000]              one poll of the debug server: the
                                                                         rank's CPU, bytes, watch's parse time
    python3 benchmarks/bench_watch.py fanin [--nodes 1,16,128,1000]          --gather's first node vs senders
    python3 benchmarks/bench_watch.py trace OUT.jsonl [--seconds 900] [--plan '[[60,"lag:1:0.1"],[180,"none"]]']
    python3 benchmarks/bench_watch.py replay A.jsonl B.jsonl ...             straggler rule vs recorded traces
    python3 benchmarks/bench_watch.py replay ... --thin 0.5 --seed 3         ... as if py-spy sampled at half the rate

faults: per fault and seed, the time from injection (the fault file written, the signal sent, the
cgroup cap applied) to the verdict line, and whether the right rank was named. A seed changes when
the fault is injected (30 + 5*seed s after watch started: its windows full, as beside a long job) and which rank gets it. Straggler faults:
`slowF` (F times the matmuls in augment_batch), `lagX` (X of the healthy step time more, every step: "+10 %
step time" is lag0.1), `capS` (a cgroup v1 CPU cap at S times the CPU the rank used in the 5 s before).
Each straggler row also prints the job's own step time after the fault over before (from its log), the
slowdown the job really had, and the load average.
healthy: events printed over a healthy run (goal 0), watch's CPU (its own and its py-spy children's,
from getrusage after it exits) per watched rank as a share of one core, its RSS at start and end.
fanin: the first node of `--gather` receiving one JSON line per node per second (real TCP on
localhost, lines the size 8 ranks make) and judging them: its CPU per second vs the number of nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from watchlab import BusyCore, CpuCap, TrainJob, Watch  # noqa: E402

JOBS = {"train": ROOT / "tests" / "watch_jobs" / "train.py",   # explicit all_reduce of the gradients
        "ddp": ROOT / "tests" / "watch_jobs" / "ddp_train.py"}   # DistributedDataParallel: the wait is in backward

KIND_GOAL = {"hang": 15.0, "straggler": 60.0, "rank_gone": 5.0}


def inject(job: TrainJob, kind: str, rank: int):
    """-> (expected event kind, cleanup)"""
    if kind in ("sleep", "other", "loader"):
        job.fault(f"{kind}:{rank}")
        return "hang", None
    if kind.startswith("slow"):
        job.fault(f"slow:{rank}:{kind[4:]}")
        return "straggler", None
    if kind.startswith("lag"):
        job.fault(f"lag:{rank}:{kind[3:]}")
        return "straggler", None
    pid = job.rank_pid(rank)
    if kind == "stop":
        os.kill(pid, signal.SIGSTOP)
        return "hang", lambda: os.kill(pid, signal.SIGCONT)
    if kind == "kill":
        os.kill(pid, signal.SIGKILL)
        return "rank_gone", None
    if kind.startswith("cap"):
        c0 = _cpu_s(pid)
        time.sleep(5)
        cap = CpuCap(pid, max(0.02, float(kind[3:]) * (_cpu_s(pid) - c0) / 5))
        return "straggler", cap.close  # the onset is now: the caller reads the clock after inject()
    raise SystemExit(f"unknown fault {kind}")


def _cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def step_times(log: Path, t_fault: float, span: float = 60.0) -> tuple[float, float] | None:
    """The job's mean step time in the `span` s before the fault and from 10 s after it to now (its own log
    lines `rank 0 step N at T`, every 20 steps): the slowdown the job had, whatever the load."""
    pts = []
    for ln in log.read_text().splitlines():
        p = ln.split()
        if len(p) == 6 and p[0] == "rank" and p[1] == "0" and p[2] == "step":
            pts.append((float(p[5]), int(p[3])))

    def rate(a, b):
        sel = [x for x in pts if a <= x[0] <= b]
        if len(sel) < 2:
            return None
        return (sel[-1][0] - sel[0][0]) / (sel[-1][1] - sel[0][1])
    before, after = rate(t_fault - span, t_fault), rate(t_fault + 10, time.monotonic())
    return (before, after) if before and after else None


def faults(a) -> None:
    rows = []
    for kind in a.kinds.split(","):
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            nproc = 3 if kind == "other" else a.nproc
            rank = seed % nproc
            with tempfile.TemporaryDirectory() as tmp:
                job = TrainJob(Path(tmp), nproc=nproc, seconds=400, job=JOBS[a.job], env=_ds_env(a))
                w = None
                cleanup = None
                try:
                    job.wait_ready()
                    w = Watch("--pid", str(job.proc.pid), *_ds_args(a))
                    time.sleep(30 + 5 * seed)  # a watch that has run a while: its windows full
                    early = [e for e in w.events if e["kind"] != "summary"]
                    want, cleanup = inject(job, kind, rank)
                    t = time.monotonic()  # after the cap's 5 s measurement; a fault file is read within a step
                    e = w.wait_for(want, a.wait, after=t)
                    took = None if e is None else e["at"] - t
                    right = e is not None and e["ranks"] == [rank]
                    extra = ""
                    if want == "straggler":
                        time.sleep(max(0.0, t + 55 - time.monotonic()))
                        st = step_times(job.log, t)
                        extra = (f" [job's step {st[1] / st[0]:.2f}x, {1000 * st[0]:.0f} ms before]" if st else "") \
                            + f" [load {os.getloadavg()[0]:.1f}]"
                    rows.append((kind, seed, rank, took, right, len(early), e and e.get("detail")))
                    print(f"{kind:8s} seed {seed} rank {rank}: "
                          + (f"{took:5.1f} s, {'right' if right else 'WRONG'} rank {e['ranks']}: {e.get('detail')}"
                             if e else f"no verdict in {a.wait:g} s") + extra
                          + (f" ({len(early)} event(s) before the fault)" if early else ""), flush=True)
                finally:
                    if cleanup:
                        cleanup()
                    if w:
                        w.stop()
                    job.kill()
    print("\nfault     median s  worst s  right  (goal; worst = the wait when one was missed)")
    for kind in dict.fromkeys(r[0] for r in rows):
        rs = [r for r in rows if r[0] == kind]
        ts = [r[3] for r in rs if r[3] is not None]
        goal = KIND_GOAL["straggler" if kind.startswith(("slow", "cap", "lag")) else "rank_gone" if kind == "kill" else "hang"]
        ts_all = [r[3] if r[3] is not None and r[4] else a.wait for r in rs]  # a miss counts as the whole wait
        print(f"{kind:8s} {statistics.median(ts_all):8.1f} {max(ts_all):8.1f}"
              f"  {sum(r[4] for r in rs)}/{len(rs)}  (≤ {goal:g} s)")


def healthy(a) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=a.nproc, seconds=a.seconds + 60, job=JOBS[a.job], env=_ds_env(a))
        try:
            job.wait_ready()
            # --quota: every rank in a cgroup of its own under a CPU quota it never reaches (watch must not
            # name a rank for being in a capped cgroup, only for being throttled by it)
            caps = [CpuCap(job.rank_pid(r), a.quota) for r in range(a.nproc)] if a.quota else []
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            ranks0 = {r: _cpu_s(job.rank_pid(r)) for r in range(a.nproc)}
            w = Watch("--pid", str(job.proc.pid), "--deadline", str(a.seconds), *_ds_args(a))
            rss = []
            t0 = time.monotonic()
            while w.proc.poll() is None:
                try:
                    for ln in open(f"/proc/{w.proc.pid}/status"):
                        if ln.startswith("VmRSS:"):
                            rss.append(int(ln.split()[1]))
                except OSError:
                    pass
                time.sleep(5)
            w.finish()
            wall = time.monotonic() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            ranks1 = {r: _cpu_s(job.rank_pid(r)) for r in range(a.nproc)}
            for c in caps:
                print(f"quota {a.quota:g} CPU, {c.dir}: " + " ".join((c.dir / "cpu.stat").read_text().split()[:6]))
        finally:
            for c in caps:
                c.close()
            job.kill()
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    bad = [e for e in w.events if e["kind"] != "summary"]
    print(f"healthy {a.nproc} ranks for {wall:.0f} s (load average {os.getloadavg()[1]:.1f} over the last 5 min, "
          f"{os.getloadavg()[2]:.1f} over 15): {len(bad)} event(s) -> {len(bad) * 3600 / wall:.1f} per hour")
    for e in bad:
        print("  ", e)
    print(f"watch CPU (itself + py-spy): {cpu:.2f} s = {100 * cpu / wall:.2f} % of a core, "
          f"{100 * cpu / wall / a.nproc:.2f} % per watched rank")
    if rss:
        print(f"watch RSS: {rss[0] / 1024:.1f} MiB after 5 s, {max(rss) / 1024:.1f} MiB max, {rss[-1] / 1024:.1f} MiB at the end")
        # flat or growing: RSS at each quarter of the run (start-up allocations are over by the first)
        q = [rss[min(len(rss) - 1, len(rss) * k // 4)] / 1024 for k in (1, 2, 3)] + [rss[-1] / 1024]
        print("watch RSS at 1/4, 1/2, 3/4 and the end of the run: " + ", ".join(f"{x:.1f}" for x in q) + " MiB")
    print("ranks' own CPU (the job; compare a run with and without --debug-server): "
          + ", ".join(f"rank {r} {100 * (ranks1[r] - ranks0[r]) / wall:.1f} %" for r in sorted(ranks0)))


def _ds_env(a) -> dict:
    if not getattr(a, "debug_server", False):
        return {}
    return {"TRAIN_DEBUG_SERVER": str(_free_port()), "TORCH_FR_BUFFER_SIZE": str(getattr(a, "entries", 2000))}


def _ds_args(a) -> list[str]:
    return ["--debug-server"] if getattr(a, "debug_server", False) else []


def seqcost(a) -> None:
    """One poll of each rank's debug server, as watch/seqfeed.py makes it, repeated: the rank's CPU per poll
    (its process CPU time over the polls, minus the same time unpolled), the answer's size, watch's parse."""
    from ddpdoctor.watch import seqfeed
    a.debug_server = True
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainJob(Path(tmp), nproc=2, seconds=600, env={**_ds_env(a), "TRAIN_DEVICE_S": "0.01"})
        try:
            job.wait_ready()
            ranks = [type("R", (), {"rank": r, "pid": job.rank_pid(r), "world_size": 2,
                                    "env": _environ(job.rank_pid(r))})() for r in range(2)]
            urls = seqfeed._store_urls(ranks)
            time.sleep(max(0.0, a.fill))  # the ring buffer fills: 20+ collectives a second
            pid = ranks[0].pid
            c0 = _cpu_s(pid)
            time.sleep(a.polls * 0.2)
            idle = _cpu_s(pid) - c0
            c0, n, parse, t0 = _cpu_s(pid), 0, 0.0, time.monotonic()
            for _ in range(a.polls):
                b = seqfeed.post(urls[0], seqfeed.CPU_EP, cap=seqfeed.FULL_MAX)
                p0 = time.process_time()
                seqfeed.parse_body(b)
                parse += time.process_time() - p0
                n += len(b)
                time.sleep(max(0.0, 0.2 - (time.monotonic() - t0) % 0.2))
            polled = _cpu_s(pid) - c0
        finally:
            job.kill()
    per = (polled - idle) / a.polls
    print(f"fr_trace_json, TORCH_FR_BUFFER_SIZE={a.entries}: {n // a.polls} bytes a poll; the rank's CPU "
          f"{1000 * per:.1f} ms a poll (every {seqfeed.FULL_EVERY_S:g} s: {100 * per / seqfeed.FULL_EVERY_S:.2f} % "
          f"of a core; every {seqfeed.DENSE_EVERY_S:g} s while a rank is still: "
          f"{100 * per / seqfeed.DENSE_EVERY_S:.2f} %); watch's parse {1000 * parse / a.polls:.2f} ms a poll "
          f"[load {os.getloadavg()[0]:.1f}]")


def _environ(pid: int) -> dict:
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(x.decode(errors="replace").split("=", 1) for x in raw if b"=" in x)


def fanin(a) -> None:
    from ddpdoctor.inspect.gather import Step
    from ddpdoctor.watch.gather import Gathered
    from ddpdoctor.watch.judge import Judge

    rank = {"rank": 0, "host": "nodeX", "pid": 1234, "world_size": 8000, "local_rank": 0, "state": "S",
            "run_ns": 0, "delay_ns": 0, "io": 0, "throttled_ns": 0, "cgroup": "/sys/fs/cgroup/cpu/slurm/uid_0/job_1",
            "stack": None}
    for n in [int(x) for x in a.nodes.split(",")]:
        port = _free_port()
        step = Step(0, n + 1, "first", tuple(["first"] + [f"n{i}" for i in range(n)]), "127.0.0.1", port, "1.0", True)
        srv = socket.create_server(("127.0.0.1", port), backlog=max(128, n))
        src = Gathered(step, None, srv)
        judge = Judge()
        stop = threading.Event()

        def sender(i):
            c = socket.create_connection(("127.0.0.1", port))
            k = 0
            while not stop.is_set():
                if src._stop:
                    break
                k += 1
                obs = [{**rank, "rank": i * 8 + r, "host": f"n{i}", "run_ns": k * 5 * 10**8, "io": k} for r in range(8)]
                c.sendall(json.dumps({"run": "1.0", "index": i + 1, "obs": obs}).encode() + b"\n")
                stop.wait(1.0)
            c.close()
        # the senders run in this process too: measure the judging thread's CPU, not theirs
        ths = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(n)]
        for th in ths:
            th.start()
        time.sleep(2)
        c0 = time.thread_time()
        p0 = time.process_time()
        t0 = time.monotonic()
        got = 0
        while time.monotonic() - t0 < a.seconds:
            now = time.monotonic()
            obs = src.observe(now, False)
            got += len(obs)
            judge.feed(obs, now)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
        judge_cpu = time.thread_time() - c0
        all_cpu = time.process_time() - p0
        stop.set()
        src.close()
        print(f"{n:5d} nodes x 8 ranks: {got / a.seconds:8.0f} rank records/s judged, judging "
              f"{100 * judge_cpu / a.seconds:.2f} % of a core; the whole process (receiving, parsing, and the "
              f"senders' encoding, an upper bound) {100 * all_cpu / a.seconds:.1f} %", flush=True)


def trace(a) -> None:
    """Record what the judge is fed (watch/observe.py's rank dicts, one line a second) on a real job, with
    the faults of --plan ([seconds after ready, fault-file spec | "none" | "cap:R:S" | "uncap" | "hog:R[:DUTY[:NICE]]"
    (rank R pinned to its CPU with a hog spinning DUTY of the time there, at NICE) | "hogfree:R[:DUTY[:NICE]]" (the hog alone on
    R's CPU, the rank free to move) | "unhog"]) marked:
    the straggler rule is then chosen by replaying the same traces with other settings."""
    from ddpdoctor.watch.observe import NodeView
    plan = json.loads(a.plan)
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "w") as out:
        job = TrainJob(Path(tmp), nproc=a.nproc, seconds=a.seconds + 60, job=JOBS[a.job])
        cap = nv = None
        try:
            job.wait_ready()
            nv = NodeView(job.proc.pid)
            pids = {r.rank: p for p, r in nv.ranks.items()}
            t0 = time.monotonic()
            while time.monotonic() - t0 < a.seconds:
                now = time.monotonic()
                while plan and now - t0 >= plan[0][0]:
                    spec = plan.pop(0)[1]
                    if spec.startswith("cap:"):
                        _, r, share = spec.split(":")
                        cap = CpuCap(pids[int(r)], float(share))
                    elif spec.startswith(("hog:", "hogfree:")):  # a busy core: hog:R[:DUTY[:NICE]] pins R with it
                        kind, r, *more = spec.split(":")
                        cap = BusyCore(pids[int(r)], float(more[0]) if more else 1.0, pin=kind == "hog",
                                       nice=int(more[1]) if len(more) > 1 else 0)
                    elif spec in ("uncap", "unhog") and cap:
                        cap.close()
                        cap = None
                    elif spec == "none":
                        job.fault_file.unlink(missing_ok=True)
                    else:
                        job.fault(spec)
                    out.write(json.dumps({"mark": spec, "t": now, "load": os.getloadavg()[0]}) + "\n")
                obs = nv.observe(now, False)
                out.write(json.dumps({"t": now, "obs": obs, "load": os.getloadavg()[0]}) + "\n")
                time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
        finally:
            if cap:
                cap.close()
            if nv:
                nv.close()
            job.kill()


def replay(a) -> None:
    """Each recorded trace through the judge with each straggler setting: the straggler/recovered events
    (seconds from the trace's start, the rank), the faults' marks, false events per hour where no fault
    was marked (a trace whose name starts with "healthy")."""
    import itertools
    import random

    from bench_watch_timeline import named_after

    from ddpdoctor.watch.judge import Judge
    from ddpdoctor.watch.straggler import MIN_SAMPLES
    data = {f: [json.loads(ln) for ln in open(f)] for f in a.traces}
    for f, rows in data.items():
        t0 = rows[0]["t"]
        marks = [f"{r['t'] - t0:.0f} {r['mark']}" for r in rows if "mark" in r]
        loads = [r["load"] for r in rows if "load" in r]
        print(f"{Path(f).name}: {(rows[-1]['t'] - t0) / 60:.1f} min, load {min(loads):.1f}-{max(loads):.1f}; "
              f"marks: {', '.join(marks) or 'none'}")

    def thin(rec, rnd):
        # as if py-spy had sampled at `a.thin` times the recorded rate: keep each sample with that probability
        w = sum(rnd.random() < a.thin for _ in range(rec["wait"]))
        return {**rec, "n": w + sum(rnd.random() < a.thin for _ in range(rec["n"] - rec["wait"])), "wait": w}
    grid = itertools.product([float(x) for x in a.lags.split(",")], [float(x) for x in a.persist.split(",")],
                             [float(x) for x in a.windows.split(",")])
    for lag, persist, win in grid:
        out, false, hours, named = [], 0, 0.0, []
        for f, rows in data.items():
            j = Judge(strag_lag=lag, strag_persist=persist, strag_window=win)
            j.min_samples = MIN_SAMPLES * a.thin
            t0 = rows[0]["t"]
            rnd = random.Random(a.seed)
            ev = []
            for r in rows:
                if "obs" not in r:
                    continue
                obs = r["obs"]
                if a.thin < 1:
                    obs = [{**o, "rec": thin(o["rec"], rnd)} if o.get("rec") and o["rec"].get("n") else o for o in obs]
                ev += [e for e in j.feed(obs, r["t"]) if e["kind"] in ("straggler", "recovered")]
            if Path(f).name.startswith("healthy"):
                false += sum(e["kind"] == "straggler" for e in ev)
                hours += (rows[-1]["t"] - t0) / 3600
            out.append(",".join(f"{e['t'] - t0:.0f}{'S' if e['kind'] == 'straggler' else 'R'}{e['ranks']}" for e in ev) or "-")
            named += named_after(rows, ev)
        print(f"lag>={lag:.2f} for {persist:.0f} s, window {win:.0f} s: false {false / max(hours, 1e-9):.1f}/h | "
              + " | ".join(out), flush=True)
        if named:
            print("  onset -> named (s): " + ", ".join(f"{m}: {'missed' if d is None else f'{d:.0f}'}" for m, d in named)
                  + "".join(f"; {x}: median {statistics.median([d if d is not None else 999 for m, d in named if m.endswith(x)]):.0f}"
                            for x in (":0.1", ":0.2") if any(m.endswith(x) for m, d in named)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("faults")
    f.add_argument("--seeds", type=int, default=3)
    f.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    f.add_argument("--nproc", type=int, default=2)
    f.add_argument("--job", choices=sorted(JOBS), default="train",
                   help="ddp: tests/watch_jobs/ddp_train.py (DistributedDataParallel, no collective of its own a step)")
    f.add_argument("--kinds", default="sleep,stop,other,loader,kill,slow1.6,lag0.1,cap0.5")
    f.add_argument("--wait", type=float, default=90, help="seconds to wait for the verdict")
    f.add_argument("--debug-server", action="store_true", help="the job starts torch's debug server")
    h = sub.add_parser("healthy")
    h.add_argument("--seconds", type=float, default=600)
    h.add_argument("--nproc", type=int, default=2)
    h.add_argument("--job", choices=sorted(JOBS), default="train",
                   help="ddp: tests/watch_jobs/ddp_train.py (DistributedDataParallel, no collective of its own a step)")
    h.add_argument("--debug-server", action="store_true", help="the job starts torch's debug server")
    h.add_argument("--quota", type=float, default=0, help="every rank in its own cgroup v1 CPU quota of this many CPUs")
    c = sub.add_parser("seqcost")
    c.add_argument("--entries", type=int, default=2000)
    c.add_argument("--polls", type=int, default=50)
    c.add_argument("--fill", type=float, default=60, help="seconds to let the ring buffer fill first")
    g = sub.add_parser("fanin")
    g.add_argument("--nodes", default="1,16,128,1000")
    g.add_argument("--seconds", type=float, default=10)
    t = sub.add_parser("trace")
    t.add_argument("out")
    t.add_argument("--seconds", type=float, default=900)
    t.add_argument("--nproc", type=int, default=2)
    t.add_argument("--job", choices=sorted(JOBS), default="train",
                   help="ddp: tests/watch_jobs/ddp_train.py (DistributedDataParallel, no collective of its own a step)")
    t.add_argument("--plan", default="[]")
    r = sub.add_parser("replay")
    r.add_argument("traces", nargs="+")
    r.add_argument("--lags", default="0.06,0.08,0.10")
    r.add_argument("--persist", default="20,25,30,40")
    r.add_argument("--windows", default="15,20,30")
    r.add_argument("--thin", type=float, default=1.0,
                   help="keep this share of each chunk's samples (0.5: as if py-spy record ran at half the rate)")
    r.add_argument("--seed", type=int, default=0, help="of --thin's draws")
    a = ap.parse_args()
    {"faults": faults, "healthy": healthy, "seqcost": seqcost, "fanin": fanin, "trace": trace,
     "replay": replay}[a.cmd](a)


if __name__ == "__main__":
    main()

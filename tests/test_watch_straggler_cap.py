"""A rank held back by its CPU quota (watch/capjudge.py): its cgroup's throttled time against its peers'.

Synthetic series with the noise of the recorded traces (as tests/test_watch_straggler_cusum.py: each main
thread on a CPU 0.10 of the wall time, waiting for one 0.35 ± 0.11 a 5 s block; 80 py-spy samples a 10 s
chunk, 0.27 in the collective). A capped rank gets no more CPU time than its peers (the CPU CUSUM cannot see
it); its cgroup's throttled time grows (cpu.stat) and the others wait 0.12 more of their samples in the
collective. The cgroups are real v1 layouts (cpu.cfs_quota_us / cpu.cfs_period_us) in a tmp dir.
"""
from __future__ import annotations

import random

from ddpdoctor.watch import capjudge
from ddpdoctor.watch.judge import Judge

RUN, DELAY, WAIT = 0.10, 0.35, 0.27

# /sys/fs/cgroup/cpu/<g>/cpu.stat on this machine (kernel 6.18, cgroup v1), a spinning process capped at 0.3
V1_STAT = "nr_periods 42\nnr_throttled 39\nthrottled_time 1434200225\nnr_bursts 0\nburst_time 0\n"
# cgroup v2 cpu.stat of a container capped by cpu.max "50000 100000" (a public write-up's real output), with
# the fields a 6.x kernel adds (kernel/sched/core.c cpu_extra_stat_show, kernel/cgroup/rstat.c)
V2_STAT = ("usage_usec 5130529\nuser_usec 5120511\nsystem_usec 10018\ncore_sched.force_idle_usec 0\n"
           "nr_periods 126\nnr_throttled 99\nthrottled_usec 4983085\nnr_bursts 0\nburst_usec 0\n")


def _cgroup(tmp_path, name, quota=-1, period=100000):
    d = tmp_path / name
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    return str(d)


def _series(seed, seconds, cgroups, throttled, nranks=2, slowed=(), onset=None, until=None):
    """`throttled(r, t)`: the throttled share of rank r's cgroup in second t; `slowed`: the ranks the others
    wait for from `onset` to `until` (their samples: 0.12 fewer in the collective). -> (events, the most accumulated)."""
    rnd = random.Random(seed)
    j = Judge()
    run_ns, delay_ns, thr_ns = [0] * nranks, [0] * nranks, {}
    block = [(0.0, 0.0)] * nranks
    ev, most = [], 0.0
    for t in range(seconds):
        if t % 5 == 0:
            block = [(rnd.gauss(0, 0.05), rnd.gauss(0, 0.11 / 2 ** 0.5)) for _ in range(nranks)]
        for cg in set(cgroups):
            thr_ns[cg] = thr_ns.get(cg, 0) + int(1e9 * max(throttled(r, t) for r in range(nranks) if cgroups[r] == cg))
        obs = []
        for r in range(nranks):
            run_ns[r] += int(RUN * (1 + block[r][0]) * 1e9)
            delay_ns[r] += int(max(0.0, DELAY + block[r][1] + throttled(r, t)) * 1e9)
            o = {"rank": r, "host": "n1", "pid": 100 + r, "world_size": nranks, "state": "S", "run_ns": run_ns[r],
                 "delay_ns": delay_ns[r], "io": 0, "stack": None, "throttled_ns": thr_ns[cgroups[r]],
                 "cgroup": cgroups[r]}
            if t % 10 == 9:
                waited_for = onset is not None and onset <= t < (until or seconds) and any(s != r for s in slowed) and r not in slowed
                p = WAIT + (0.12 if waited_for else 0.0)
                w = sum(rnd.random() < p for _ in range(80))
                o["rec"] = {"n": 80, "wait": w, "lines": {"augment_batch train.py:48": 80 - w}}
            obs.append(o)
        ev += [e for e in j.feed(obs, float(t)) if e["kind"] in ("straggler", "recovered")]
        most = max([most] + [v[0] for v in j._cap.acc.values()])
    return ev, most


def test_a_rank_capped_to_a_tenth_more_step_time_is_named_by_its_throttled_time(tmp_path):
    """From block K (120 s) rank 1's cgroup is throttled 0.06-0.10 of the wall time (a cap that makes its
    step ≈ +10 %, as measured live): named within 30 s, the right rank, its cause with the quota and where
    to raise it, on every seed; not "recovered" while it stays throttled."""
    cgs = [_cgroup(tmp_path, "ddp-r0"), _cgroup(tmp_path, "ddp-r1", quota=45000)]
    for seed in range(6):
        rnd = random.Random(1000 + seed)
        ev, _ = _series(seed, 240, cgs, lambda r, t: (rnd.uniform(0.06, 0.10) if r == 1 and t >= 120 else 0.0),
                        slowed=(1,), onset=120)
        assert [e["kind"] for e in ev] == ["straggler"], (seed, ev)
        (e,) = ev
        assert e["ranks"] == [1] and e["t"] - 120 <= 30, (seed, e["t"])
        assert e["cause"].startswith("throttled by its CPU quota: ") and "quota 45 ms of period 100 ms" in e["cause"]
        assert f"echo -1 > {cgs[1]}/cpu.cfs_quota_us" in e["cause"], e["cause"]


def test_a_healthy_rank_under_a_quota_never_hit_is_never_named(tmp_path):
    """Every rank in a cgroup of its own with a generous quota that is never hit (throttled stays 0): an hour
    of the healthy noise, no event, and the throttle CUSUM never accumulates at all."""
    cgs = [_cgroup(tmp_path, "ddp-r0", quota=400000), _cgroup(tmp_path, "ddp-r1", quota=400000)]
    ev, most = _series(3, 3600, cgs, lambda r, t: 0.0)
    assert ev == [] and most == 0.0, (ev, most)


def test_a_rank_waited_for_but_not_throttled_is_not_named_as_capped(tmp_path):
    """Its peers wait for it (samples) but its cgroup is never throttled: not named by the throttle CUSUM
    (the 40 s rule on both measures judges such a rank: here its busy share is no larger, so no event)."""
    cgs = [_cgroup(tmp_path, "ddp-r0", quota=400000), _cgroup(tmp_path, "ddp-r1", quota=400000)]
    ev, most = _series(4, 400, cgs, lambda r, t: 0.0, slowed=(1,), onset=120)
    assert ev == [] and most == 0.0, (ev, most)


def test_a_brief_throttle_is_a_transient(tmp_path):
    """Throttled 0.3 of the wall for 10 s (a burst over a tight quota), its peers waiting meanwhile: no event."""
    cgs = [_cgroup(tmp_path, "ddp-r0"), _cgroup(tmp_path, "ddp-r1", quota=45000)]
    ev, _ = _series(5, 300, cgs, lambda r, t: 0.3 if r == 1 and 150 <= t < 160 else 0.0, slowed=(1,), onset=150,
                    until=160)
    assert ev == [], ev


def test_ranks_throttled_alike_are_no_straggler(tmp_path):
    """The whole job in one capped cgroup, throttled 0.2 of the time from 60 s (every rank slowed alike): no
    rank is named, and the throttle CUSUM does not judge ranks that share a cgroup at all."""
    one = _cgroup(tmp_path, "job")
    ev, most = _series(6, 400, [one] * 3, lambda r, t: 0.2 if t >= 60 else 0.0, nranks=3)
    assert ev == [] and most == 0.0, (ev, most)


def test_ranks_each_under_a_quota_they_reach_are_not_named_for_its_noise(tmp_path):
    """Every rank in a cgroup of its own under a quota it reaches (docker --cpus per rank): each block's
    throttled share 0.05-0.35, independently per rank, and their samples as noisy as ever, an hour, 2 and 3
    ranks: no event (without the peers-unthrottled condition the differences accumulate like a cap's)."""
    for n in (2, 3):
        own = [_cgroup(tmp_path, f"r{n}{r}", quota=50000) for r in range(n)]
        rnd = random.Random(70 + n)
        blocks = {}
        ev, most = _series(70 + n, 3600, own, lambda r, t: blocks.setdefault((r, t // 5), rnd.uniform(0.05, 0.35)),
                           nranks=n)
        assert ev == [] and most == 0.0, (n, ev, most)


def test_cpu_stat_parsers_read_real_v1_and_v2_text():
    assert capjudge.parse_cpu_stat(V1_STAT) == {"nr_periods": 42, "nr_throttled": 39, "throttled_ns": 1434200225}
    assert capjudge.parse_cpu_stat(V2_STAT) == {"nr_periods": 126, "nr_throttled": 99, "throttled_ns": 4983085000}
    assert capjudge.parse_cpu_stat("") == {"nr_periods": 0, "nr_throttled": 0, "throttled_ns": 0}


def test_quota_parsers_read_v1_and_v2_and_no_quota():
    assert capjudge.parse_quota("45000\n", "100000\n", None) == (45000, 100000)
    assert capjudge.parse_quota("-1\n", "100000\n", None) is None
    assert capjudge.parse_quota(None, None, "50000 100000\n") == (50000, 100000)
    assert capjudge.parse_quota(None, None, "max 100000\n") is None
    assert capjudge.parse_quota("garbage", "100000", None) is None


def test_the_fix_names_who_set_the_quota_from_the_cgroup_path():
    d = "/sys/fs/cgroup/cpu,cpuacct/docker/3f4e8a9b2c1d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
    assert "docker update --cpus N 3f4e8a9b2c1d" in capjudge.who_sets(d)
    assert "docker update --cpus N 3f4e8a9b2c1d" in capjudge.who_sets(
        "/sys/fs/cgroup/system.slice/docker-3f4e8a9b2c1d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f.scope")
    k8s = "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1c2d3e4f_5a6b_7c8d_9e0f_1a2b3c4d5e6f.slice/cri-containerd-ab12.scope"
    assert "limits.cpu" in capjudge.who_sets(k8s) and "pod 1c2d3e4f-5a6b-7c8d-9e0f-1a2b3c4d5e6f" in capjudge.who_sets(k8s)
    assert "job 4242" in capjudge.who_sets("/sys/fs/cgroup/cpu/slurm/uid_0/job_4242/step_0")
    assert "job 4242" in capjudge.who_sets("/sys/fs/cgroup/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
    assert capjudge.who_sets("/sys/fs/cgroup/cpu/ddp-r1").endswith("(echo -1 > /sys/fs/cgroup/cpu/ddp-r1/cpu.cfs_quota_us lifts it)")
    assert capjudge.who_sets("/sys/fs/cgroup/ddp.slice/r1").endswith("(echo max > /sys/fs/cgroup/ddp.slice/r1/cpu.max lifts it)")

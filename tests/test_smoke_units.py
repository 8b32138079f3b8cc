"""`ddpdoctor smoke` without torch: plan, bandwidth maths, launcher variables, the watchdog's
rules, and the judgement of DD5xx on plain data."""
import subprocess
import sys

import pytest

from ddpdoctor.checks import distributed as D
from ddpdoctor.facts.smoke import RankRecord, RankState, Verdict
from ddpdoctor.model import Severity, Status
from ddpdoctor.facts import bandwidth as bw
from ddpdoctor import launch
from ddpdoctor.smoke import plan
from ddpdoctor.smoke.plan import SmokeConfig
from ddpdoctor.units import KiB, MiB
from ddpdoctor.smoke.progress import Tracker, heartbeat
from ddpdoctor.smoke.report import build_report
from ddpdoctor.render import smoke as render_smoke
from ddpdoctor.validate import BadInput


# ---------------------------------------------------------------- plan

def test_correctness_sizes_run_from_a_few_bytes_to_max_size():
    assert plan.correctness_sizes(SmokeConfig()) == [4, 256, 16 * KiB, MiB, 64 * MiB]
    assert plan.correctness_sizes(SmokeConfig(max_size=MiB)) == [4, 256, 16 * KiB, MiB]
    assert plan.correctness_sizes(SmokeConfig(quick=True)) == [4 * KiB]


def test_quick_and_fix_round_measure_no_bandwidth():
    assert plan.bandwidth_sizes(SmokeConfig()) == [64 * KiB, MiB, 16 * MiB, 64 * MiB]
    assert plan.bandwidth_sizes(SmokeConfig(quick=True)) == []
    assert plan.bandwidth_sizes(SmokeConfig(fix_round=True)) == []


def test_phase_plan_is_identical_up_to_init_for_every_backend():
    cfg = SmokeConfig(max_size=MiB)
    gloo, nccl = plan.phases(cfg, "gloo", 4), plan.phases(cfg, "nccl", 4)
    upto = gloo.index(plan.INIT) + 1
    assert gloo[:upto] == nccl[:upto]
    assert "gloo all_reduce" in nccl and "gloo all_reduce" not in gloo
    assert any("bfloat16" in p for p in nccl) and not any("bfloat16" in p for p in gloo)
    assert gloo[-2:] == [plan.REPORT, plan.DONE]


def test_broadcast_source_moves_from_rank_to_rank():
    steps = plan.correctness_steps(SmokeConfig(max_size=MiB), "gloo", 3)
    assert {s.src for s in steps if s.op == "broadcast"} == {0, 1, 2}


def test_bf16_sums_stay_exact():
    assert plan.contribution(3, 8, "float32") == (4, 36, False)
    assert plan.contribution(3, 8, "bfloat16") == (4, 36, False)
    value, total, ones = plan.contribution(3, 64, "bfloat16")  # 2080 is not exact in bf16
    assert (value, total, ones) == (1, 64, True)


@pytest.mark.parametrize("text,n", [("4096", 4096), ("64M", 64 * MiB), ("64MiB", 64 * MiB), ("1g", 1 << 30), ("4K", 4096)])
def test_parse_size(text, n):
    assert plan.parse_size(text) == n


def test_parse_size_refuses_nonsense():
    with pytest.raises(ValueError):
        plan.parse_size("lots")


def test_bandwidth_iterations_do_not_depend_on_timing():
    assert plan.bandwidth_iters(64 * KiB) == (2, 20)
    assert plan.bandwidth_iters(64 * MiB) == (1, 5)


# ---------------------------------------------------------------- bandwidth

def test_busbw_uses_nccl_tests_all_reduce_factor():
    # nccl-tests PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all_reduce
    assert bw.algbw(10**9, 1.0) == pytest.approx(1.0)
    assert bw.busbw("all_reduce", 10**9, 1.0, 8) == pytest.approx(1.75)
    assert bw.busbw("all_reduce", 10**9, 1.0, 2) == pytest.approx(1.0)
    assert bw.busbw("broadcast", 10**9, 1.0, 8) == pytest.approx(1.0)


def test_world_bandwidth_is_the_slowest_ranks_median():
    rows = bw.world_rows({0: [{"size": 10**6, "times": [0.001, 0.002, 0.009]}],
                          1: [{"size": 10**6, "times": [0.004, 0.004, 0.001]}]}, 2)
    assert rows[0]["time_s"] == 0.004 and rows[0]["slowest_rank"] == 1
    assert rows[0]["busbw_gbps"] == pytest.approx(0.25)


# ---------------------------------------------------------------- launchers

def test_torchrun_variables_and_agent_store():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node1",
           "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    r = launch.detect(env)
    assert (r.launcher, r.rank, r.world_size, r.local_rank, r.local_world_size) == ("torchrun", 3, 8, 1, 2)
    assert r.agent_store and r.run_id == "abc.0"


def test_srun_task_maps_to_rank_variables_with_master_from_the_step_nodelist():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
           "SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x3),2", "SLURM_JOB_ID": "4242",
           "SLURM_STEP_NODELIST": "gpu[07-09,12]", "SLURM_JOB_NODELIST": "gpu[07-09,12],spare1"}
    r = launch.detect(env)
    assert (r.launcher, r.rank, r.world_size, r.local_rank, r.local_world_size) == ("slurm", 5, 8, 1, 2)
    assert r.master_addr == "gpu07" and r.master_port == 29500 + 4242 % 1000
    assert r.worker_env()["RANK"] == "5" and r.worker_env()["MASTER_ADDR"] == "gpu07"


def test_the_batch_script_itself_is_not_an_srun_task():
    assert launch.detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "n[1-2]"}) is None


@pytest.mark.parametrize("nodelist,first", [("node1", "node1"), ("gpu[07-09,12],cpu1", "gpu07"),
                                            ("r[1-2]n[3-4]", "r1n3"), ("a1,b[2-3]", "a1"), ("x[001-100]-ib", "x001-ib")])
def test_first_host_of_a_slurm_hostlist(nodelist, first):
    assert launch.first_host(nodelist) == first


def test_open_mpi_needs_master_addr_and_maps_its_ranks():
    env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    with pytest.raises(BadInput, match="MASTER_ADDR"):
        launch.detect(env)
    r = launch.detect({**env, "MASTER_ADDR": "node1"})
    assert (r.launcher, r.rank, r.world_size, r.local_rank, r.local_world_size, r.master_port) == ("mpi", 2, 4, 0, 2, 29500)


def test_rank_outside_the_world_is_bad_input():
    with pytest.raises(BadInput, match="outside a world of 2"):
        launch.detect({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"})


def test_no_launcher_means_standalone():
    assert launch.detect({"PATH": "/usr/bin"}) is None


# ---------------------------------------------------------------- the watchdog

CFG = SmokeConfig(timeout=5.0)


def _hb(r, i, phase, beat, a=0.0, err=None, c=True):
    return heartbeat(r, i, phase, beat, "node1", 100 + r, r, a, err, c)


def test_a_rank_whose_heartbeat_stops_trips_the_watchdog_after_the_timeout():
    t = Tracker(2, CFG, now=0.0)
    t.update(_hb(0, 10, "all_reduce", 1), 0.0)
    t.update(_hb(1, 10, "all_reduce", 1), 0.0)
    for k in range(1, 20):  # rank 0 keeps beating, rank 1 is silent
        t.update(_hb(0, 10, "all_reduce", 1 + k), k * 0.25)
    assert t.late(4.9) == []
    assert 1 in t.late(5.1)
    v = t.verdict(5.1, "test")
    assert v["kind"] == "stall"
    states = {s["rank"]: s for s in v["states"]}
    assert states[1]["heartbeat_age_s"] == pytest.approx(5.1) and states[0]["heartbeat_age_s"] < 1


def test_after_an_error_the_watchdog_waits_seconds_not_the_timeout():
    t = Tracker(2, SmokeConfig(timeout=30.0), now=0.0)
    t.update(_hb(0, 11, "report", 1, err="all_reduce: Connection closed by peer"), 0.0)
    t.update(_hb(1, 10, "all_reduce", 1), 0.0)
    t.update(_hb(0, 11, "report", 2, err="x"), 3.0)
    assert 1 in t.late(3.5)


def test_ranks_that_finished_are_never_late_and_unseen_ones_lag_by_the_timeout():
    t = Tracker(3, CFG, now=0.0)
    t.update(_hb(0, 30, plan.DONE, 1), 0.0)
    assert t.late(CFG.timeout - 0.1) == []  # rank 0 done; ranks 1-2 unseen, lagging by less than --timeout
    assert t.late(CFG.timeout + 0.1) == [1, 2]


def test_while_no_rank_has_started_the_start_up_floor_applies():
    t = Tracker(2, CFG, now=0.0)
    t.update(_hb(0, 1, plan.IMPORT, 1), 0.0)
    for k in range(1, 200):
        t.update(_hb(0, 1, plan.IMPORT, 1 + k), k * 0.25)  # a slow import torch, still beating
    assert t.late(49.0) == []  # no rank started yet: a cold filesystem may take this long
    assert t.late(61.0) == [0, 1]


def test_a_rank_stuck_importing_torch_is_late_timeout_after_the_others_started():
    t = Tracker(3, CFG, now=0.0)
    t.update(_hb(2, 1, plan.IMPORT, 1), 0.0)  # rank 2 entered import torch and stops there
    t.update(_hb(0, 2, plan.STORE, 1), 2.0)  # ranks 0 and 1 are ready at 2 s, waiting in the store
    t.update(_hb(1, 2, plan.STORE, 1), 2.0)
    for k in range(1, 60):
        t.update(_hb(0, 2, plan.STORE, 1 + k), 2.0 + k * 0.25)
        t.update(_hb(1, 2, plan.STORE, 1 + k), 2.0 + k * 0.25)
        t.update(_hb(2, 1, plan.IMPORT, 1 + k), 2.0 + k * 0.25)  # it even keeps beating
    assert t.late(2.0 + CFG.timeout - 0.1) == []
    assert t.late(2.0 + CFG.timeout + 0.1) == [2]  # only the laggard, not the ranks waiting for it


# ---------------------------------------------------------------- DD501: who holds the others up

def _state(rank, phase="all_reduce float32 4 B", index=10, hb=0.1, **kw):
    return RankState.from_dict({"rank": rank, "host": "node1", "pid": 100 + rank, "phase": phase, "index": index,
                                "in_phase_s": 31.0, "heartbeat_age_s": hb, "error": None, "exit": None,
                                "proc_state": None, "in_collective": True, "seen": True, **kw})


def _ctx(verdict=None, records=None, world_size=2, cfg=CFG):
    class Ctx:
        pass
    c = Ctx()
    c.verdict, c.world_size, c.cfg, c.backend = verdict, world_size, cfg, "gloo"
    c.records = {r: RankRecord.from_dict({"rank": r, **v}) for r, v in (records or {}).items()}
    return c


def _verdict(states):
    return Verdict.from_dict({"kind": "stall", "late": [s.rank for s in states], "after_s": 31.0,
                              "detected_by": "rank 0's watchdog", "timeout_s": 30.0, "states": [s.raw for s in states]})


def test_stopped_rank_is_named_and_waiting_ranks_are_not():
    states = [_state(0), _state(1, hb=30.5, proc_state="stopped", in_collective=False), _state(2)]
    assert [s.rank for s in D.culprits(states)] == [1]
    findings = list(D.every_rank_finished(_ctx(_verdict(states), world_size=3)))
    assert len(findings) == 1 and findings[0].severity is Severity.ERROR
    assert "rank 1 (pid 101, node1) is stopped" in findings[0].message
    assert "all_reduce float32 4 B" in findings[0].message
    assert "ranks 0, 2 wait" in findings[0].hint
    assert findings[0].fix.commands == ("kill -CONT 101   # on node1",)


def test_rank_behind_the_others_is_named_when_nobody_failed():
    states = [_state(0, phase="barrier", index=12), _state(1, phase="init", index=5)]
    assert [s.rank for s in D.culprits(states)] == [1]


def test_every_rank_alive_in_one_collective_points_at_the_transport():
    states = [_state(0), _state(1)]
    assert D.culprits(states) == []
    (f,) = D.every_rank_finished(_ctx(_verdict(states)))
    assert "all 2 ranks are alive and inside the collective" in f.message
    assert f.fix.env == {"NCCL_DEBUG": "INFO"}


def test_a_rank_in_its_own_code_instead_of_the_collective_is_named():
    states = [_state(0), _state(1, in_collective=False)]
    (f,) = D.every_rank_finished(_ctx(_verdict(states)))
    assert "rank 1" in f.message and "has not entered the collective" in f.message


def test_states_relayed_from_a_frozen_rank_0_are_context_not_culprits():
    states = [_state(0, hb=31, proc_state="stopped"), RankState.from_dict({"rank": 1, "seen": False, "relayed": True})]
    assert [s.rank for s in D.culprits(states)] == [0]


# ---------------------------------------------------------------- DD502, DD504, DD505

def _rec(rank, **kw):
    base = {"rank": rank, "host": f"node{rank // 2 + 1}", "pid": 100 + rank, "correctness": [], "versions": {},
            "settings": {}, "phases": {"init": 0.1}}
    base.update(kw)
    return base


def test_a_missing_ranks_contribution_is_recognised_in_a_wrong_sum():
    wrong = {"op": "all_reduce", "dtype": "int64", "size": 4096, "src": 0, "ok": False, "ones": False,
             "first_bad": {"index": 0, "got": 4, "expected": 6}}
    recs = {r: _rec(r, correctness=[wrong]) for r in range(3)}
    (f,) = D.collectives_correct(_ctx(records=recs, world_size=3))
    assert f.severity is Severity.ERROR
    assert "all_reduce int64 4 KiB: element 0 is 4, expected 6 on ranks 0-2" in f.message
    assert "rank 1's contribution (2) were missing" in f.message


def test_torch_version_drift_is_an_error_naming_ranks_and_hosts():
    recs = {0: _rec(0, versions={"torch": "2.13.0"}), 1: _rec(1, versions={"torch": "2.13.0"}),
            2: _rec(2, versions={"torch": "2.12.1"}), 3: _rec(3, versions={"torch": "2.12.1"})}
    (f,) = D.versions_agree(_ctx(records=recs, world_size=4))
    assert f.severity is Severity.ERROR
    assert "'2.13.0' on ranks 0-1 (node1)" in f.message and "'2.12.1' on ranks 2-3 (node2)" in f.message


def test_one_drift_rule_for_ranks_and_nodes():
    """DD504 (smoke) and DD716 (cluster) give the same severity for the same drift (checks/drift.py)."""
    from test_cluster_view import judge, record, view
    for key, old, sev in (("torch", "2.12.1", Severity.ERROR), ("driver", "535.1", Severity.WARNING),
                          ("python", "3.10.1", Severity.WARNING)):
        recs = {r: _rec(r, versions={key: old if r == 1 else "x"}) for r in range(2)}
        (f,) = D.versions_agree(_ctx(records=recs, world_size=2))
        nodes = {i: record(i, 2) for i in range(2)}
        nodes[1]["versions"] = {**nodes[1]["versions"], key: old}
        (g,) = [x for x in judge(view(nodes, 2))["DD716"].findings if x.evidence.get("key") == key]
        assert f.severity is g.severity is sev, key


def test_a_setting_exported_on_one_node_only_is_a_warning():
    recs = {0: _rec(0, settings={"NCCL_IB_DISABLE": "1"}), 1: _rec(1, settings={"NCCL_IB_DISABLE": "1"}),
            2: _rec(2, settings={}), 3: _rec(3, settings={})}
    (f,) = D.settings_agree(_ctx(records=recs, world_size=4))
    assert "NCCL_IB_DISABLE differs" in f.message and "unset on ranks 2-3 (node2)" in f.message


def test_per_rank_gpu_binding_is_not_drift():
    recs = {r: _rec(r, settings={"CUDA_VISIBLE_DEVICES": str(r)}) for r in range(2)}
    assert list(D.settings_agree(_ctx(records=recs))) == []


def test_expected_busbw_shortfall_is_a_warning_not_a_failure():
    recs = {r: _rec(r, bandwidth=[{"size": 10**6, "times": [0.001] * 5}]) for r in range(2)}
    report = build_report({"records": {str(r): v for r, v in recs.items()}, "world_size": 2, "backend": "gloo"},
                          SmokeConfig(expect_busbw=10.0), launcher="standalone", select=["DD503"])
    (res,) = report.results
    assert res.status is Status.WARN and "below the expected 10 GB/s" in res.findings[0].message
    assert report.exit_code == 0


def test_json_report_carries_per_rank_records_and_the_verdict():
    states = [_state(0), _state(1, hb=30, proc_state="stopped")]
    world = {"records": {"0": _rec(0)}, "world_size": 2, "backend": "gloo", "verdict": _verdict(states).raw}
    report = build_report(world, CFG, launcher="torchrun")
    d = report.to_dict()
    assert d["command"] == "smoke" and d["exit_code"] == 1
    assert d["ranks"][0]["rank"] == 0 and d["verdict"]["states"][1]["proc_state"] == "stopped"
    assert "text" not in d  # the text is render/smoke.py's, from the report
    dd501 = next(r for r in d["results"] if r["id"] == "DD501")
    assert all(f["evidence"]["held_up_by"] == [1] for f in dd501["findings"])
    assert "holding the others up: ranks 1" in render_smoke.text(report)


def test_the_smoke_table_says_what_dd501_found_and_does_not_judge_without_it():
    """The renderer reads DD501's evidence; with DD501 left out it does not guess."""
    states = [_state(0), _state(1, hb=30, proc_state="stopped")]
    world = {"records": {"0": _rec(0)}, "world_size": 2, "backend": "gloo", "verdict": _verdict(states).raw}
    text = render_smoke.text(build_report(world, CFG, launcher="torchrun", ignore=["DD501"]))
    assert "holding the others up: see DD501" in text and "ranks 1" not in text.split("holding")[1].split(")")[0]


def test_the_bandwidth_table_is_rendered_from_the_report():
    recs = {r: _rec(r, bandwidth=[{"size": 1 << 20, "times": [0.001] * 5}]) for r in range(2)}
    report = build_report({"records": {str(r): v for r, v in recs.items()}, "world_size": 2, "backend": "gloo"},
                          SmokeConfig(), launcher="standalone")
    text = render_smoke.text(report)
    assert "all_reduce bandwidth (nccl-tests definitions; median of 5 iterations" in text and "1 MiB" in text


@pytest.mark.torchjob
def test_importing_the_smoke_command_and_report_does_not_import_torch():
    code = ("import sys; import ddpdoctor.cli.smoke, ddpdoctor.smoke.report, ddpdoctor.smoke.supervise; "
            "from ddpdoctor import registry; registry.load_all(); import ddpdoctor; ddpdoctor.__version__; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("env,launcher", [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n1",
      "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "j"}, "torchrun"),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "n1"}, "mpirun"),
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "MASTER_ADDR": "n1"}, "mpi"),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
      "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "n[1-2]"}, "srun"),
])
def test_one_launcher_table_for_a_rank_reading_itself_and_inspect_reading_it(env, launcher):
    """smoke (launch.detect, its own environment) and inspect (probes/ranks.claim, /proc/<pid>/environ)
    read the same table (launch.RANK_VARS): the same rank, world size and local rank."""
    from ddpdoctor.probes import ranks
    mine = launch.detect(env)
    theirs = ranks.claim(env)
    assert (mine.rank, mine.world_size, mine.local_rank) == theirs[:3] == (3, 4, 1)
    assert ranks.launcher_name(env, theirs[4]) == launcher

"""The runner: concurrency, per-check timeouts, the global deadline, crashes as results."""
import time

from ddpdoctor.model import Finding, Report, Severity, Status
from ddpdoctor.registry import Check, Skip
from ddpdoctor.runner import run_checks, run_report


def mk(id, func, timeout=2.0):
    return Check(id, f"title {id}", "ddpdoctor", func, frozenset(), timeout)


def test_slow_checks_run_concurrently_and_results_keep_their_order():
    def slow(ctx):
        time.sleep(0.4)
        yield Finding(Severity.INFO, "slow done")

    def fast(ctx):
        yield Finding(Severity.WARNING, "fast")

    t0 = time.monotonic()
    res = run_checks([mk("DD901", slow), mk("DD902", slow), mk("DD903", fast)], None, deadline=5)
    assert time.monotonic() - t0 < 0.75  # two 0.4 s checks overlapped
    assert [r.id for r in res] == ["DD901", "DD902", "DD903"]
    assert [r.status for r in res] == [Status.PASS, Status.PASS, Status.WARN]


def test_overrun_becomes_timeout_and_does_not_wait_for_the_check():
    def hang(ctx):
        time.sleep(30)
        yield Finding(Severity.INFO, "never")

    t0 = time.monotonic()
    res = run_checks([mk("DD901", hang, timeout=0.3)], None, deadline=5)
    assert time.monotonic() - t0 < 1.0
    assert res[0].status is Status.TIMEOUT and "0.3 s timeout" in res[0].reason


def test_global_deadline_stops_everything():
    def hang(ctx):
        time.sleep(30)
        return ()

    t0 = time.monotonic()
    res = run_checks([mk("DD901", hang, timeout=20), mk("DD902", hang, timeout=20)], None, deadline=0.5)
    assert time.monotonic() - t0 < 1.2
    assert all(r.status is Status.TIMEOUT and "global deadline" in r.reason for r in res)


def test_a_crashing_check_is_a_crash_result_not_a_traceback():
    def boom(ctx):
        raise ZeroDivisionError("x")

    def skip(ctx):
        raise Skip("not here")

    res = run_checks([mk("DD901", boom), mk("DD902", skip)], None, deadline=5)
    assert res[0].status is Status.CRASH and "ZeroDivisionError" in res[0].reason
    assert res[1].status is Status.SKIP and res[1].reason == "not here"


def test_exit_codes_follow_the_contract():
    def err(ctx):
        yield Finding(Severity.ERROR, "bad")

    def warn(ctx):
        yield Finding(Severity.WARNING, "meh")

    def boom(ctx):
        raise RuntimeError

    assert run_report("t", "h", [mk("DD901", warn)], None, deadline=2).exit_code == 0
    assert run_report("t", "h", [mk("DD901", warn)], None, deadline=2, fail_on_warning=True).exit_code == 1
    assert run_report("t", "h", [mk("DD901", err)], None, deadline=2).exit_code == 1
    assert run_report("t", "h", [mk("DD901", boom)], None, deadline=2).exit_code == 3
    assert run_report("t", "h", [mk("DD901", boom), mk("DD902", err)], None, deadline=2).exit_code == 1


def test_json_contract_fields():
    from ddpdoctor.model import Fix

    def err(ctx):
        yield Finding(Severity.ERROR, "bad", hint="h", fix=Fix("do it", ("cmd",), {"GLOO_SOCKET_IFNAME": "eth0"}),
                      evidence={"t": (1, 2)})

    d = run_report("network", "h", [mk("DD901", err)], None, deadline=2).to_dict()
    assert d["schema"] == 1 and d["command"] == "network" and d["host"] == "h" and d["exit_code"] == 1
    r = d["results"][0]
    assert set(r) >= {"id", "title", "category", "status", "duration_s", "findings"}
    f = r["findings"][0]
    assert f == {"severity": "error", "message": "bad", "hint": "h",
                 "fix": {"summary": "do it", "commands": ["cmd"], "env": {"GLOO_SOCKET_IFNAME": "eth0"}},
                 "evidence": {"t": [1, 2]}}
    assert isinstance(Report, type)

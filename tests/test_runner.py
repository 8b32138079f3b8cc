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
    assert f == {"id": "DD901.default", "severity": "error", "message": "bad", "hint": "h",
                 "fix": {"summary": "do it", "commands": ["cmd"], "env": {"GLOO_SOCKET_IFNAME": "eth0"}},
                 "evidence": {"t": [1, 2]}}
    assert isinstance(Report, type)


def test_a_finding_id_is_its_checks_id_and_its_kind():
    def two(ctx):
        yield Finding(Severity.ERROR, "refused", kind="refused")
        yield Finding(Severity.WARNING, "slow")

    r = run_report("network", "h", [mk("DD901", two)], None, deadline=2, silenced=()).to_dict()["results"][0]
    assert [f["id"] for f in r["findings"]] == ["DD901.refused", "DD901.default"]


def test_a_silenced_finding_is_dropped_and_the_status_follows_the_rest():
    def two(ctx):
        yield Finding(Severity.ERROR, "refused", kind="refused")
        yield Finding(Severity.WARNING, "slow", kind="slow")

    [res] = run_checks([mk("DD901", two)], None, deadline=2, silenced={"DD901.refused"})
    assert res.status == Status.WARN and [f.kind for f in res.findings] == ["slow"] and res.silenced == 1
    assert res.to_dict()["silenced"] == 1
    [res] = run_checks([mk("DD901", two)], None, deadline=2, silenced={"DD901.refused", "DD901.slow"})
    assert res.status == Status.PASS and res.findings == ()
    [res] = run_checks([mk("DD901", two)], None, deadline=2, silenced={"DD902.refused"})
    assert res.status == Status.FAIL and "silenced" not in res.to_dict()


def test_the_sites_silenced_findings_apply_to_every_command(tmp_path, monkeypatch):
    def refused(ctx):
        yield Finding(Severity.ERROR, "refused", kind="refused")

    conf = tmp_path / "ddpdoctor.toml"
    conf.write_text('[checks]\nsilenced = ["dd901.Refused"]\n')
    monkeypatch.setenv("DDPDOCTOR_CONFIG", str(conf))
    assert run_report("network", "h", [mk("DD901", refused)], None, deadline=2).exit_code == 0
    monkeypatch.setenv("DDPDOCTOR_CONFIG", str(tmp_path / "absent.toml"))  # a broken config silences nothing
    assert run_report("network", "h", [mk("DD901", refused)], None, deadline=2).exit_code == 1


def test_the_site_config_takes_finding_ids_only():
    import pytest
    from ddpdoctor.siteconfig import ConfigError, from_mapping
    assert from_mapping({"checks": {"silenced": ["DD102.refused", "dl003.default"]}}).silenced == {
        "DD102.refused", "DL003.default"}
    for bad in (["DD102"], ["DD102.Refused by firewall"], "DD102.refused", ["DD1.x"]):
        with pytest.raises(ConfigError, match="finding id"):
            from_mapping({"checks": {"silenced": bad}})
    with pytest.raises(ConfigError, match="unknown key checks.silence"):
        from_mapping({"checks": {"silence": []}})

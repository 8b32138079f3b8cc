"""Issue 10: a slow or silent resolver is a warning everywhere, "does not resolve" only for a real
negative answer (network/prolog checks on plain facts; the cluster matrix). Lab: test_lab_reliability.py."""
from __future__ import annotations

import sys
from pathlib import Path

from ddpdoctor import registry, runner
from ddpdoctor.slurm.prolog import judge as prolog_judge
from ddpdoctor.model import Status
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.siteconfig import SiteConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cluster_view import judge as cluster_judge, probe, record, view  # noqa: E402


class _Facts:
    """Only what the DD2xx checks read."""
    hostname = "node1"
    fqdn = "node1"
    master = "node1"
    master_addr = None
    local_addrs = {"198.18.4.1"}
    route = None
    route_nic = None

    def __init__(self, local, master):
        self.local_res = local
        self.master_res = master
        self.fqdn_res = local

    def prefetch(self, *names):
        pass


SILENT = Resolution("node1", (), "resolver gave no answer within 2 s", 2.0, True)
NEGATIVE = Resolution("node1", (), "Name or service not known (gaierror -2)", 0.01)


def _run(facts, prefix="DD20"):
    checks = [c for c in registry.select("prolog") if c.id.startswith(prefix)]
    return {r.id: r for r in runner.run_checks(checks, facts, deadline=5)}


def test_silent_resolver_warns_and_does_not_drain_by_default():
    res = _run(_Facts(SILENT, SILENT))
    assert res["DD201"].status is Status.WARN and res["DD207"].status is Status.WARN
    assert all("does not resolve" not in f.message for r in res.values() for f in r.findings)
    v, _ = prolog_judge(list(res.values()), SiteConfig(), strict=False)
    assert v.exit_code == 0 and not v.faults


def test_silent_resolver_drains_when_the_site_says_so():
    res = _run(_Facts(SILENT, SILENT))
    v, _ = prolog_judge(list(res.values()), SiteConfig(drain_on_timeout=True), strict=False)
    assert v.exit_code == 1 and any(f.startswith("DD201") for f in v.faults)


def test_negative_answer_still_fails():
    res = _run(_Facts(NEGATIVE, NEGATIVE))
    assert res["DD201"].status is Status.FAIL
    assert "does not resolve" in res["DD201"].findings[0].message


def test_default_probe_timeout_is_above_the_slow_threshold():
    from ddpdoctor.checks.dns import SLOW_RESOLVER_S
    assert SiteConfig().probe_timeout > SLOW_RESOLVER_S


def test_cluster_matrix_calls_a_silent_resolver_a_warning():
    n = 3
    recs = {i: record(i, n) for i in range(n)}
    p = probe(2, resolve_error="resolver gave no answer within 2 s")
    p["resolve_timed_out"] = True
    recs[1] = record(1, n, {2: p})
    res = cluster_judge(view(recs, n))
    (f,) = res["DD712"].findings
    assert res["DD712"].status is Status.WARN and "does not resolve" not in f.message

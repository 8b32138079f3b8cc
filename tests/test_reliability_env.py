"""Issue 10: the env audit refuses addresses nobody can connect to."""
from __future__ import annotations

import pytest

from ddpdoctor import registry, runner
from ddpdoctor.model import Status


class _Ctx:
    master = None
    port = None

    def __init__(self, env):
        self.env = env


def _run(env, check_id):
    (res,) = runner.run_checks([registry.get(check_id)], _Ctx(env), deadline=5)
    return res


@pytest.mark.parametrize("addr", ["0.0.0.0", "::", "0:0:0:0:0:0:0:0"])
def test_master_addr_unspecified_fails(addr):
    res = _run({"MASTER_ADDR": addr}, "DD801")
    assert res.status is Status.FAIL and "unspecified" in res.findings[0].message


@pytest.mark.parametrize("ep", [":::", "0.0.0.0:29400", "[::]:29400", "fe80::1:29400", "node1:", "[::1]:"])
def test_rdzv_endpoint_that_cannot_be_connected_to_fails(ep):
    assert _run({"PET_RDZV_ENDPOINT": ep}, "DD803").status is Status.FAIL


@pytest.mark.parametrize("ep", ["node1:29400", "node1", "[fd00::1]:29400", "[fd00::1]", "10.0.0.1:29400"])
def test_good_rdzv_endpoints_pass(ep):
    assert _run({"PET_RDZV_ENDPOINT": ep}, "DD803").status is Status.PASS


def test_good_master_addr_passes():
    assert _run({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, "DD801").status is Status.PASS


def test_a_superscript_digit_in_master_addr_is_a_finding_not_a_crash():
    res = _run({"MASTER_ADDR": "1²3.0.0.1"}, "DD801")
    assert res.status is Status.FAIL


def test_a_superscript_digit_in_slurm_job_gpus_is_not_a_crash():
    from ddpdoctor.checks.slurm import _gpu_for

    class G:
        index = 2
        uuid = "GPU-abc"
    assert _gpu_for("²", [G()]) is None
    assert _gpu_for("2", [G()]) is not None

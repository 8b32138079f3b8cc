"""Path-MTU black hole in the 2-node lab: jumbo frames on the hosts, 1500 on the switch ports.

ddpdoctor (worker against `network --listen`) names it in seconds; the real torchrun + Gloo job
rendezvouses, passes a 1-element all_reduce and then hangs on a 16 MiB one; with the MTU made
equal end to end (the fix DD110 prints) the same job passes.
"""
from __future__ import annotations

from pathlib import Path

from netlab import diagnose, failing, job, result

LARGE = Path(__file__).resolve().parent / "lab_jobs" / "allreduce_large.py"


def jumbo_behind_1500(lab):
    for n in lab.names:
        lab.set_mtu(n, 9000, switch_port=1500, offloads=False)


def test_jumbo_frames_behind_a_1500_switch_are_a_black_hole_found_in_seconds(lab):
    jumbo_behind_1500(lab)
    report, took, lis = diagnose(lab)
    assert failing(report) == {"DD110"}, result(report, "DD110")
    assert result(report, "DD102")["status"] == "pass" and result(report, "DD103")["status"] == "pass"
    assert result(report, "DD111")["status"] == "pass"  # both hosts say 9000: only the path differs
    (f,) = result(report, "DD110")["findings"]
    assert "black hole between node2 (eth0 MTU 9000) and node1 (eth0 MTU 9000)" in f["message"]
    assert "largest packet that passes: 1500 bytes" in f["message"]
    ev = f["evidence"]
    assert ev["sent_ok"] == 0 and ev["back_ok"] == 0 and ev["clamped"]["complete"]
    assert ev["df_largest_ok"] == 1500 and ev["df_tried"]["9000"] is False
    assert "sudo ip link set eth0 mtu 1500   # on node2" in f["fix"]["commands"]
    assert took < 10
    assert lis["exit_code"] == 0
    (w,) = lis["workers"]  # the master's view: its MTU, and what arrived of each bulk probe
    assert sorted(b["bytes"] for b in w["bulk"]) == [0, 1 << 20] and {b["mtu"] for b in w["bulk"]} == {9000}
    # the real job: rendezvous and the small all_reduce pass, the large one never completes
    res = job(lab, script=LARGE, wall_timeout=60)  # SMALL OK printed first: room for torch's import under load
    out = "\n".join(res.output.values())
    assert not res.ok and "SMALL OK" in out and "ALLREDUCE OK" not in out, res.output
    # the fix: the MTU the path carries, on every node
    for n in lab.names:
        lab.ip(n, "link", "set", "eth0", "mtu", "1500")
    res = job(lab, script=LARGE, wall_timeout=90)  # a job that works: room for torch's import under load
    assert res.ok, res.output
    report, _, _ = diagnose(lab)
    assert result(report, "DD110")["status"] == "pass"


def test_equal_jumbo_path_passes_and_names_the_largest_packet(lab):
    for n in lab.names:
        lab.set_mtu(n, 9000, switch_port=9000, offloads=False)
    report, _, _ = diagnose(lab)
    r = result(report, "DD110")
    assert r["status"] == "pass", r
    assert "largest don't-fragment packet 9000 bytes" in r["findings"][0]["message"]


def test_mtu_mismatch_between_worker_and_master_is_a_warning(lab):
    lab.set_mtu("node2", 9000, switch_port=9000)
    report, _, _ = diagnose(lab)
    (f,) = result(report, "DD111")["findings"]
    assert f["severity"] == "warning"
    assert "node2 eth0 has MTU 9000, node1 eth0 has 1500" in f["message"]

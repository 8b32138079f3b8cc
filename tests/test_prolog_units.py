"""The prolog's judgement on plain data: site config, Slurm exit semantics, DD6xx and DD70x checks."""
from __future__ import annotations

import types

import pytest

from ddpdoctor import registry, units
from ddpdoctor.model import CheckResult, Finding, Severity, Status
from ddpdoctor.probes import system
from ddpdoctor.probes.nvml import Gpu, GpuProcess, Snapshot
from ddpdoctor import siteconfig as cfgmod
from ddpdoctor.slurm.prolog import judge
from ddpdoctor.siteconfig import ConfigError, SiteConfig, Thresholds
from ddpdoctor.units import GiB, MiB
from ddpdoctor.facts.node import PrologFacts, job_gpus
from ddpdoctor.slurm.taskprolog import route_target


def run_check(check_id, ctx):
    chk = registry.get(check_id)
    try:
        return list(chk.func(ctx) or ())
    except registry.Skip as e:
        return f"skip: {e}"


# ----------------------------------------------------------------------------- site configuration

def write(tmp_path, text):
    p = tmp_path / "ddpdoctor.toml"
    p.write_text(text)
    return str(p)


def test_config_reads_selection_thresholds_and_task_variables(tmp_path):
    c = cfgmod.load(write(tmp_path, """
[prolog]
ignore = ["DD304"]
warn_only = ["dd303"]
deadline = 3
drain = true
report_file = "/var/log/ddpdoctor/%n-%j.json"
[thresholds]
min_dev_shm = "8GiB"
min_memlock = "64M"
max_idle_gpu_memory = 536870912
expected_gpus = 8
[task]
variables = ["GLOO_SOCKET_IFNAME"]
"""))
    assert c.ignore == ("DD304",) and c.warn_only == ("DD303",) and c.deadline == 3.0 and c.drain
    assert c.thresholds == Thresholds(min_dev_shm=8 * GiB, min_memlock=64 * MiB, max_idle_gpu_memory=512 * MiB,
                                      expected_gpus=8)
    assert c.task_variables == ("GLOO_SOCKET_IFNAME",)
    assert c.is_warn_only("DD303") and not c.is_warn_only("DD304")


@pytest.mark.parametrize("text,message", [
    ("[prolog]\nignroe = []", "unknown key prolog.ignroe"),
    ("[thresholds]\nmin_dev_shm = \"lots\"", "thresholds.min_dev_shm: 'lots' is not a size"),
    ("[prolog]\nselect = [\"shm\"]", "'shm' is not a check id or prefix"),
    ("[prolog]\ndeadline = 0", "prolog.deadline: want a number of seconds"),
    ("[slurm]\n", "unknown section [slurm]"),
    ("[prolog\n", "not valid TOML"),
    ("[thresholds]\nmin_memlock = true", "is not a size"),
])
def test_config_mistakes_are_named_with_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=None) as e:
        cfgmod.load(path)
    assert path in str(e.value) and message in str(e.value)


def test_the_default_config_file_is_optional_but_a_named_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(cfgmod, "DEFAULT_PATH", str(tmp_path / "absent.toml"))
    monkeypatch.delenv("DDPDOCTOR_CONFIG", raising=False)
    assert cfgmod.load() == SiteConfig()
    with pytest.raises(ConfigError, match="no such file"):
        cfgmod.load(str(tmp_path / "missing.toml"))
    assert cfgmod.parse_size("unlimited", "x", allow_unlimited=True) is None
    assert units.human_size(64 * MiB) == "64 MiB" and units.human_size(None) == "unlimited"


# ----------------------------------------------------------------------------- exit semantics

def res(cid, status, *findings, reason=""):
    return CheckResult(cid, f"title {cid}", "system", status, 0.01, tuple(findings), reason)


ERR = Finding(Severity.ERROR, "/dev/shm is 64 MiB, below the site minimum of 1 GiB")


def test_only_a_failing_check_is_a_node_fault():
    v, _ = judge([res("DD601", Status.FAIL, ERR), res("DD201", Status.PASS)], SiteConfig(), strict=False)
    assert v.exit_code == 1 and v.fault_lines == ["ddpdoctor: DD601 /dev/shm is 64 MiB, below the site minimum of 1 GiB"]
    assert v.reason() == "ddpdoctor: DD601 /dev/shm is 64 MiB, below the site minimum of 1 GiB"


def test_timeouts_and_crashes_never_drain_unless_asked():
    results = [res("DD207", Status.TIMEOUT, reason="no verdict within its 6 s timeout"),
               res("DD702", Status.CRASH, reason="ddpdoctor bug, please report: KeyError: 'x'")]
    v, _ = judge(results, SiteConfig(), strict=False)
    assert v.exit_code == 0 and v.faults == [] and len(v.timeouts) == 1 and len(v.crashes) == 1
    assert judge(results, SiteConfig(), strict=True)[0].exit_code == 3
    v, _ = judge(results[:1], SiteConfig(drain_on_timeout=True), strict=False)
    assert v.exit_code == 1 and v.faults[0].startswith("DD207 title DD207: timed out")


def test_warn_only_checks_are_demoted_and_the_reason_stays_one_short_line():
    cfg = SiteConfig(warn_only=("DD6",))
    v, out = judge([res("DD601", Status.FAIL, ERR)], cfg, strict=False)
    assert v.exit_code == 0 and out[0].status is Status.WARN and v.warnings
    many = [res(f"DD20{i}", Status.FAIL, Finding(Severity.ERROR, "x" * 300)) for i in range(1, 4)]
    v, _ = judge(many, SiteConfig(), strict=False)
    r = v.reason()
    assert len(r) <= 200 and r.startswith("ddpdoctor: DD201 xxx") and r.endswith("...") and len(v.faults) == 3
    v, _ = judge([res("DD201", Status.FAIL, Finding(Severity.ERROR, "short")), many[1]], SiteConfig(), strict=False)
    assert v.reason() == "ddpdoctor: DD201 short (+1 more)"


# ----------------------------------------------------------------------------- DD6xx on plain facts

def sysctx(shm=None, memlock=(8 * MiB, 8 * MiB), rdma=(), **th):
    return types.SimpleNamespace(shm=shm, memlock=system.Limit(*memlock), rdma=rdma, thresholds=Thresholds(**th))


def shm(size, free=None, mode=0o1777, ro=False, largest=()):
    opts = ("ro",) if ro else ("rw", "nosuid")
    return system.ShmInfo("/dev/shm", True, size, size if free is None else free, mode,
                          system.Mount("/dev/shm", "tmpfs", "tmpfs", opts), "", largest)


def test_dev_shm_below_the_site_minimum_is_an_error():
    (f,) = run_check("DD601", sysctx(shm(64 * MiB)))
    assert f.severity is Severity.ERROR and f.message == "/dev/shm is 64 MiB, below the site minimum of 1 GiB"
    (f,) = run_check("DD601", sysctx(shm(64 * MiB), min_dev_shm=32 * MiB))
    assert f.severity is Severity.INFO


def test_dev_shm_filled_by_leftovers_names_the_largest_files():
    (f,) = run_check("DD601", sysctx(shm(8 * GiB, free=100 * MiB, largest=(("nccl-AbCd", 7 * GiB), ("torch_1_2", 1 * GiB)))))
    assert f.message == "/dev/shm has 100 MiB free of 8 GiB, below the site minimum of 1 GiB"
    assert "nccl-AbCd (7 GiB)" in f.hint


def test_dev_shm_must_be_writable_by_everyone():
    assert run_check("DD602", sysctx(shm(8 * GiB))) == []
    (f,) = run_check("DD602", sysctx(shm(8 * GiB, mode=0o755)))
    assert "mode 0755" in f.message and f.fix.commands == ("chmod 1777 /dev/shm",)
    (f,) = run_check("DD602", sysctx(shm(8 * GiB, ro=True)))
    assert f.message == "/dev/shm is mounted read-only"


def test_memlock_matters_only_where_rdma_devices_exist():
    (f,) = run_check("DD603", sysctx(shm(1), rdma=()))
    assert f.severity is Severity.INFO
    (f,) = run_check("DD603", sysctx(shm(1), rdma=("mlx5_0",)))
    assert f.severity is Severity.ERROR and "limited to 8 MiB (site minimum unlimited)" in f.message
    assert any("PropagateResourceLimitsExcept=MEMLOCK" in c for c in f.fix.commands)
    (f,) = run_check("DD603", sysctx(shm(1), memlock=(None, None), rdma=("mlx5_0",)))
    assert f.severity is Severity.INFO
    (f,) = run_check("DD603", sysctx(shm(1), memlock=(64 * MiB, None), rdma=("mlx5_0",), min_memlock=64 * MiB))
    assert f.severity is Severity.INFO


def test_mount_of_reads_mountinfo_and_takes_the_innermost_mount(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 0:21 / / rw,relatime - overlay overlay rw\n"
                  "30 22 0:25 / /dev rw,nosuid - tmpfs udev rw,size=10M\n"
                  "31 30 0:26 / /dev/shm ro,nosuid - tmpfs shm rw,size=65536k\n")
    m = system.mount_of("/dev/shm", str(mi))
    assert (m.point, m.fstype, m.readonly) == ("/dev/shm", "tmpfs", True)


def test_nccl_conf_values_count_unless_the_environment_sets_them(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("# site\nNCCL_SOCKET_IFNAME=ib\nNCCL_IB_DISABLE = 1\nnot a line\n")
    assert system.read_nccl_conf((str(conf),)) == {"NCCL_SOCKET_IFNAME": "ib", "NCCL_IB_DISABLE": "1"}
    ctx = PrologFacts({"NCCL_IB_DISABLE": "0"}, nccl_conf=(str(conf),), hostname="n1")
    assert ctx.env["NCCL_SOCKET_IFNAME"] == "ib" and ctx.env["NCCL_IB_DISABLE"] == "0"


# ----------------------------------------------------------------------------- DD70x on plain NVML snapshots

def gpuctx(snap, want=("0", "1"), expected=0, max_idle=GiB):
    return types.SimpleNamespace(job_gpus=tuple(want), gpus=snap,
                                 thresholds=Thresholds(expected_gpus=expected, max_idle_gpu_memory=max_idle))


def gpu(i, used=300 * MiB, procs=()):
    return Gpu(i, f"GPU-{i:08d}-aaaa", "NVIDIA H100", 80 * GiB, used, tuple(procs))


def test_job_gpus_come_from_the_prologs_environment():
    assert job_gpus({"SLURM_JOB_GPUS": "0,3"}) == ("0", "3")
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == ("GPU-abc",)
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == ()


def test_a_gpu_slurm_gave_the_job_that_nvml_does_not_list_is_an_error():
    snap = Snapshot(True, "", "550.54", (gpu(0),))
    (f,) = run_check("DD701", gpuctx(snap))
    assert f.message == "Slurm gave the job GPU(s) 1, which NVML does not list (it lists 1: 0-0)"
    (f,) = run_check("DD701", gpuctx(Snapshot(False, "NVML: Driver Not Loaded")))
    assert f.message == "the job was given GPU(s) 0,1 but NVML cannot see any: NVML: Driver Not Loaded"
    (f,) = run_check("DD701", gpuctx(snap, want=(), expected=8))
    assert f.message == "NVML lists 1 GPU(s), the node should have 8"
    assert run_check("DD701", gpuctx(snap, want=())).startswith("skip:")


def test_a_gpu_busy_before_the_job_starts_is_an_error():
    snap = Snapshot(True, "", "550.54", (gpu(0, procs=[GpuProcess(4121, 12 * GiB, "python")]), gpu(1, used=3 * GiB)))
    a, b = run_check("DD702", gpuctx(snap))
    assert a.message == "GPU 0 already runs 1 process(es) before the job starts: pid 4121 python (12 GiB)"
    assert "kill -9 4121" in a.fix.commands
    assert b.message.startswith("GPU 1 holds 3 GiB before the job starts, with no process NVML can name")
    (ok,) = run_check("DD702", gpuctx(Snapshot(True, "", "550.54", (gpu(0), gpu(1)))))
    assert ok.severity is Severity.INFO


def test_the_task_prolog_routes_to_the_first_node_or_from_it_to_the_second():
    assert route_target(["n1", "n2", "n3"], "n3") == "n1"
    assert route_target(["n1", "n2", "n3"], "n1") == "n2"
    assert route_target(["n1"], "n1") is None

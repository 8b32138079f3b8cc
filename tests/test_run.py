"""`ddpdoctor run`: torchrun's own parser, the DD82x judgement, and a real torchrun launch via exec."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ddpdoctor.runcmd import preflight
from ddpdoctor.runcmd.facts import split_endpoint
from ddpdoctor.runcmd.parse import NotALaunch, split

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
ENV.pop("SLURM_JOB_ID", None)


def failing(pf):
    return sorted(r.id for r in pf.report.results if r.status.value == "fail")


def warned(pf):
    return sorted(r.id for r in pf.report.results if r.status.value == "warn")


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return "train.py"


def pre(argv, **kw):
    kw.setdefault("network", False)
    kw.setdefault("env", {})
    return preflight(argv, **kw)


@pytest.mark.torchjob
def test_torchrun_is_parsed_by_torchs_own_parser_without_importing_torch():
    code = ("import sys; from ddpdoctor.runcmd.parse import split; "
            "s = split(['srun', '-N', '2', '--gpus-per-node=8', 'torchrun', '--nnodes=2', '--nproc_per_node', '8', "
            "'--rdzv-endpoint=n1:29400', 'train.py', '--lr', '1']); "
            "print(s.wrappers, s.torchrun.nnodes, s.torchrun.nproc_per_node, s.torchrun.rdzv_endpoint, s.script, "
            "s.script_args, 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    assert p.stdout.strip() == "['srun'] 2 8 n1:29400 train.py ['--lr', '1'] False", p.stderr


def test_python_m_torch_distributed_run_and_plain_python_and_not_a_launch():
    s = split(["python3", "-u", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "t.py"])
    assert s.kind == "torchrun" and s.torchrun.standalone and s.script == "t.py"
    s = split(["python", "t.py", "--x"])
    assert s.kind == "python" and s.script == "t.py" and s.script_args == ["--x"]
    with pytest.raises(NotALaunch):
        split(["bash", "-c", "torchrun t.py"])


def test_a_good_single_node_command_passes(script):
    pf = pre(["torchrun", "--standalone", "--nproc-per-node=2", script])
    assert failing(pf) == [] and pf.report.exit_code == 0


def test_standalone_with_several_nodes_and_node_rank_out_of_range(script):
    pf = pre(["torchrun", "--standalone", "--nnodes=2", "--node-rank=2", script])
    assert failing(pf) == ["DD820", "DD825"]


def test_multi_node_rendezvous_ids(script):
    base = ["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=node1:29400"]
    assert warned(pre(base + [script])) == ["DD821"]
    assert failing(pre(base + ["--rdzv-id=$RANDOM", script])) == ["DD821"]
    assert warned(pre(base + ["--rdzv-id=123", script], env={"SLURM_JOB_ID": "999"})) == ["DD821"]
    assert warned(pre(base + ["--rdzv-id=999", script], env={"SLURM_JOB_ID": "999"})) == []


def test_malformed_and_loopback_endpoints(script):
    for ep in ("node1:29x00", "node1:70000", ":29400", "[::1:29400"):
        assert "DD822" in failing(pre(["torchrun", "--nnodes=2", f"--rdzv-endpoint={ep}", "--rdzv-id=1", script])), ep
    assert "DD822" in failing(pre(["torchrun", "--nnodes=1:x", script]))
    assert failing(pre(["torchrun", "--nnodes=2", "--rdzv-endpoint=localhost:29400", "--rdzv-id=1", script])) \
        == ["DD823"]
    assert split_endpoint("[fe80::1]:29400", None).port == 29400


def test_nproc_per_node_above_the_gpus_present(script):
    argv = ["torchrun", "--nproc-per-node=8", "--standalone", script]
    assert failing(pre(argv, gpu_probe=lambda: 4)) == ["DD824"]
    assert failing(pre(argv, gpu_probe=lambda: 8)) == []
    assert failing(pre(argv, gpu_probe=lambda: 8, env={"CUDA_VISIBLE_DEVICES": "0,1"})) == ["DD824"]
    assert failing(pre(argv, gpu_probe=lambda: None)) == []  # no driver: unknown, not an error


def test_missing_script_and_torchrun_refusing_an_option(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert failing(pre(["torchrun", "--standalone", "nope.py"])) == ["DD826"]
    assert failing(pre(["torchrun", "--nproc-per-nod=2", "--bogus", "x.py"])) == ["DD827"]


def test_the_script_is_linted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("import torch\nd = torch.utils.data.DataLoader(range(2), shuffle=True, sampler=[0])\n")
    pf = pre(["torchrun", "--standalone", "t.py"])
    assert failing(pf) == ["DL006"]


GLOO = textwrap.dedent("""\
    import os, sys
    import torch.distributed as dist

    def main():
        dist.init_process_group("gloo")
        dist.barrier()
        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank == 0:
            print("ARGV", sys.argv[1:], flush=True)
        sys.exit(int(os.environ.get("EXIT_WITH", "0")))

    if __name__ == "__main__":
        main()
    """)


def _ddpdoctor(args, cwd, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "run", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**ENV, **(env or {})})


@pytest.mark.torchjob
def test_a_real_torchrun_gloo_job_runs_with_argv_and_exit_code_unchanged(tmp_path):
    (tmp_path / "job.py").write_text(GLOO)
    cmd = ["torchrun", "--standalone", "--nproc-per-node=2", "job.py", "a b", "--flag=1"]
    p = _ddpdoctor(["--no-network", "--", *cmd], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ARGV ['a b', '--flag=1']" in p.stdout
    # A failing job: ddpdoctor's exit code is exactly torchrun's own.
    direct = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                            env={**ENV, "EXIT_WITH": "3"})
    via = _ddpdoctor(["--no-network", "--", *cmd], tmp_path, env={"EXIT_WITH": "3"})
    assert direct.returncode != 0 and via.returncode == direct.returncode


@pytest.mark.torchjob
def test_exec_keeps_the_pid_so_signals_reach_the_job(tmp_path):
    (tmp_path / "pid.py").write_text("import os, sys\nprint(os.getpid(), flush=True)\nsys.exit(5)\n")
    p = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "run", "--no-network", "--", sys.executable, "pid.py"],
                         stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    out, _ = p.communicate(timeout=60)
    assert int(out.strip()) == p.pid and p.returncode == 5


@pytest.mark.torchjob
def test_a_refused_launch_exits_non_zero_and_starts_nothing(tmp_path):
    (tmp_path / "job.py").write_text("open('STARTED', 'w').write('x')\n"
                                     "import torch\nd = torch.utils.data.DataLoader(range(2), shuffle=True, sampler=[0])\n")
    cmd = ["torchrun", "--standalone", "--nnodes=2", "--nproc-per-node=1", "job.py"]
    p = _ddpdoctor(["--", *cmd], tmp_path, timeout=60)
    assert p.returncode == 1
    assert not (tmp_path / "STARTED").exists()
    assert "DD820" in p.stderr and "DL006" in p.stderr and "--force" in p.stderr
    p = _ddpdoctor(["--json", "--", *cmd], tmp_path, timeout=60)
    d = json.loads(p.stdout)
    assert d["launched"] is False and p.returncode == 1


@pytest.mark.torchjob
def test_force_launches_anyway(tmp_path):
    (tmp_path / "job.py").write_text("open('STARTED', 'w').write('x')\n")
    p = _ddpdoctor(["--force", "--no-network", "--", sys.executable, "job.py"], tmp_path, timeout=60)
    assert p.returncode == 0 and (tmp_path / "STARTED").exists()
    (tmp_path / "STARTED").unlink()
    p = _ddpdoctor(["--", "torchrun", "--standalone", "--nnodes=3", sys.executable], tmp_path, timeout=60)
    assert p.returncode == 1 and not (tmp_path / "STARTED").exists()


@pytest.mark.torchjob
def test_bad_command_is_one_line_and_exit_2(tmp_path):
    p = _ddpdoctor(["--", "bash", "-c", "true"], tmp_path, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = _ddpdoctor([], tmp_path, timeout=60)
    assert p.returncode == 2


def test_the_network_preflight_checks_the_rendezvous_host(script):
    pf = preflight(["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=no-such-host.invalid:29400",
                    "--rdzv-id=1", script], env={})
    assert "DD205" in failing(pf)  # the real resolver says the name does not resolve
    assert not {"DD101", "DD102", "DD103"} & {r.id for r in pf.report.results}  # nothing is listening yet


def test_srun_on_several_nodes_with_a_single_node_torchrun(script):
    assert failing(pre(["srun", "-N", "2", "torchrun", "--nproc-per-node=8", script])) == ["DD829"]
    assert failing(pre(["srun", "--nodes=2", "torchrun", "--nnodes=2", "--rdzv-endpoint=n1:29400",
                        "--rdzv-id=1", script])) == []
    assert failing(pre(["torchrun", script], env={"SLURM_NNODES": "4"})) == []  # not through srun

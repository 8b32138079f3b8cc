"""A new user's first hour, step by step as the README and the help lines lead them (issue 25).

Each test runs the user's own commands (real processes, real sockets) and pins what must not mislead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ddpdoctor import registry
from ddpdoctor.facts.node import PrologFacts
from ddpdoctor.model import Severity, Status
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.probes.nics import Nic
from ddpdoctor.probes.sockets import Route
from ddpdoctor.runner import run_checks
from ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1"}


def ddpdoctor(*args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *args], capture_output=True, text=True,
                          timeout=timeout, env=kw.pop("env", ENV), cwd=kw.pop("cwd", ROOT), **kw)


# --------------------------------------------------------------------------- the README's two network lines, one host

@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_listen_and_worker_line_on_the_same_host_work_together():
    """`network --listen` on the master, and the worker line run there too (the README says it may):
    the worker probes the listener like any worker, and the listener counts it."""
    port = free_port()
    listener = subprocess.Popen([sys.executable, "-m", "ddpdoctor", "network", "--listen", "--port", str(port),
                                 "--expect", "1", "--timeout", "30"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=ENV, cwd=ROOT)
    try:
        for _ in range(100):
            if subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout.strip():
                break
            time.sleep(0.1)
        worker = ddpdoctor("network", "--master", "127.0.0.1", "--port", str(port), "--json")
        out, _ = listener.communicate(timeout=40)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    report = json.loads(worker.stdout)
    by_id = {c["id"]: c for c in report["results"]}
    assert worker.returncode == 0, worker.stdout
    assert by_id["DD105"]["status"] == "pass" and "ddpdoctor network --listen" in by_id["DD105"]["findings"][0]["message"]
    assert by_id["DD102"]["status"] == "pass" and by_id["DD103"]["status"] == "pass"
    assert listener.returncode == 0, out
    assert "never arrived" not in out and "1 worker(s) reached both ports of 1 expected" in out


# --------------------------------------------------------------------------- DD202 in a Slurm prolog: no master there

LO = Nic("lo", True, ("127.0.0.1",), ("::1",), 65536, 0)
ETH0 = Nic("eth0", True, ("198.18.1.1",), (), 1500, 0)


def _prolog_dd202(nodes):
    ctx = PrologFacts({}, nccl_conf=(), hostname="n1", nodes=nodes)
    # the first node of the job: the "master" the prolog's facts derive is this very host, on loopback
    ctx.__dict__.update(nics=[LO, ETH0], local_res=Resolution("n1", ("127.0.1.1",)), fqdn="n1",
                        master_res=Resolution("n1", ("127.0.1.1",)), route=Route("127.0.1.1", "127.0.0.1"))
    (res,) = run_checks([registry.get("DD202")], ctx, deadline=5)
    return res


def test_prolog_of_a_multi_node_job_fails_dd202_on_its_first_node():
    res = _prolog_dd202(["n1", "n2"])
    assert res.status is Status.FAIL
    assert "master is this host" not in res.findings[0].message


def test_prolog_of_a_one_node_job_only_warns_dd202():
    res = _prolog_dd202(["n1"])
    (f,) = res.findings
    assert f.severity is Severity.WARNING and "one-node job" in f.message


# --------------------------------------------------------------------------- the EADDRINUSE fix: one port per job

def _launch_line_on_node(cmd: str, node: int) -> str:
    """What `cmd` expands to on one node of Slurm job 4242 (torchrun replaced by echo)."""
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "4242", "SLURM_NODEID": str(node),
           "SLURMD_NODENAME": f"node{node + 1}"}
    return subprocess.run(["bash", "-c", cmd.replace("torchrun", "echo", 1)], capture_output=True, text=True,
                          env=env, timeout=10).stdout


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_port_in_use_fix_gives_every_node_of_a_job_the_same_port():
    from ddpdoctor.catalog import get
    from ddpdoctor.catalog.model import Confirm
    mode = get("MASTER_PORT_IN_USE")
    launch = [Confirm("node1", "29500").fill(c) for c in mode.fix.commands if c.startswith("torchrun")]
    assert launch and not any("RANDOM" in c for c in mode.fix.commands)
    for cmd in launch:
        lines = {_launch_line_on_node(cmd, n) for n in range(4)}
        assert len(lines) == 1 and "--rdzv-endpoint=node1:" in lines.pop()
    # the harness tells the trap apart: $RANDOM draws a port per node
    trap = "torchrun --rdzv-endpoint=node1:$((29500 + RANDOM % 1000)) ..."
    assert len({_launch_line_on_node(trap, n) for n in range(6)}) > 1


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_port_in_use_fix_chooses_a_free_port_once():
    from ddpdoctor.catalog import get
    (pick,) = [c for c in get("MASTER_PORT_IN_USE").fix.commands if c.startswith("PORT=")]
    out = subprocess.run(["bash", "-c", pick + '\necho "$PORT"'], capture_output=True, text=True, timeout=10)
    port = int(out.stdout.strip())
    import socket
    with socket.socket() as s:
        s.bind(("", port))  # free


def test_failure_mode_pages_speak_to_the_user_not_about_the_catalogs_history():
    from ddpdoctor import catalog
    from ddpdoctor.catalog.pages import failure_page
    pages = [failure_page(fm) for fm in catalog.failures().values()]
    assert any(fm.origin == "ddpdoctor" for fm in catalog.failures().values())
    assert not [p.splitlines()[0] for p in pages if "while building ddpdoctor" in p]


# --------------------------------------------------------------------------- arm --dir D, then explain --fr D

@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_explain_fr_finds_the_dumps_in_the_per_job_folder_arm_made(tmp_path):
    root = tmp_path / "fr"
    armed = ddpdoctor("arm", "--dir", str(root), env={**ENV, "SLURM_JOB_ID": "4242"})
    prefix = dict(ln[len("export "):].split("=", 1) for ln in armed.stdout.splitlines()
                  if ln.startswith("export "))["TORCH_FR_DUMP_TEMP_FILE"]
    # where torch writes rank 0's dump: the prefix plus the rank (a real NCCL dump from the fixtures)
    with open("/work/shared/fixtures/nccl-fr-timeout/fr_rank0", "rb") as src, open(prefix + "0", "wb") as dst:
        dst.write(src.read())
    out = ddpdoctor("explain", "--fr", str(root))
    assert out.returncode == 0, out.stderr
    assert "1 rank dump from" in out.stdout and "4242" in out.stdout and "all_reduce" in out.stdout
    assert "per-job folders" in out.stderr


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_explain_fr_reads_the_newest_job_and_names_the_others(tmp_path):
    for job, age in (("101", 100), ("102", 0)):
        d = tmp_path / job
        d.mkdir()
        f = d / "fr_rank_0"
        f.write_bytes(open("/work/shared/fixtures/nccl-fr-timeout/fr_rank0", "rb").read())
        t = time.time() - age
        os.utime(f, (t, t))
    out = ddpdoctor("explain", "--fr", str(tmp_path))
    assert out.returncode == 0 and f"{tmp_path}/102" in out.stdout and "the others: 101" in out.stderr


# --------------------------------------------------------------------------- small things a user notices

@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_help_lines_show_defaults_without_a_none_bound_and_with_an_example():
    for cmd in ("network", "smoke", "cluster", "prolog", "explain", "inspect", "run"):
        out = ddpdoctor(cmd, "--help").stdout
        assert "None" not in out, (cmd, [ln for ln in out.splitlines() if "None" in ln])
    assert "[default: 60.0]" in ddpdoctor("network", "--help").stdout
    assert "ddpdoctor network --listen --port 29400" in ddpdoctor("network", "--help").stdout
    assert "ddpdoctor explain --log job.log" in ddpdoctor("explain", "--help").stdout


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_explain_a_lint_rule_answers_that_rule():
    out = ddpdoctor("explain", "DL001")
    assert out.returncode == 0 and out.stdout.startswith("# DL001: ") and "## Fix" in out.stdout
    assert "did you mean" not in out.stdout + out.stderr
    page = json.loads(ddpdoctor("explain", "dl003", "--json").stdout)["lint_rule"]
    assert page["id"] == "DL003" and page["fix"]
    bad = ddpdoctor("explain", "DL999")
    assert bad.returncode == 2 and "unknown lint rule" in bad.stderr


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_list_checks_lists_every_id_explain_knows():
    from ddpdoctor import catalog
    from ddpdoctor.lint.registry import all_rules
    entries = json.loads(ddpdoctor("list-checks", "--json").stdout)
    kinds = {e["kind"] for e in entries}
    assert kinds == {"check", "lint rule", "failure mode"}
    ids = {e["id"] for e in entries}
    assert set(all_rules()) <= ids and set(catalog.failures()) <= ids and set(registry.load_all()) <= ids
    text = ddpdoctor("list-checks").stdout
    assert "\nlint rules" in text and "\nfailure modes" in text and "DL001" in text
    for e in entries[::15]:  # every id listed has a page
        assert ddpdoctor("explain", e["id"]).returncode == 0, e["id"]


# --------------------------------------------------------------------------- run: a verdict also when all is well

@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_run_says_the_verdict_when_all_is_well(tmp_path):
    (tmp_path / "job.py").write_text("print('job ran')\n")
    dry = ddpdoctor("run", "--dry-run", "--", "torchrun", "--standalone", "--nproc-per-node=2", "job.py", cwd=tmp_path)
    assert dry.returncode == 0 and dry.stdout == ""
    assert "pre-flight:" in dry.stderr and " passed" in dry.stderr and "would launch: torchrun --standalone" in dry.stderr
    real = ddpdoctor("run", "--no-network", "--", sys.executable, "job.py", cwd=tmp_path)
    assert real.returncode == 0 and real.stdout == "job ran\n"
    assert "pre-flight:" in real.stderr and "launching" in real.stderr


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_run_dry_run_of_a_refused_launch_says_it_would_refuse(tmp_path):
    (tmp_path / "job.py").write_text("print('x')\n")
    p = ddpdoctor("run", "--dry-run", "--", "torchrun", "--standalone", "--nnodes=2", "--nproc-per-node=1", "job.py",
                  cwd=tmp_path)
    assert p.returncode == 1 and "DD820" in p.stderr and "would refuse to launch" in p.stderr


# --------------------------------------------------------------------------- smoke: the prompt soon after the verdict

@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_smoke_under_torchrun_with_a_stopped_rank_returns_soon_after_the_verdict():
    """A rank stopped with SIGSTOP cannot handle torchrun's SIGTERM: torchrun waited its 30 s grace
    before SIGKILL (measured 32.7 s from verdict to prompt before the fix, 3.1 s after, /tmp run of
    this same scenario). Rank 0 now ends its stopped local ranks once the verdict is out."""
    import signal
    import psutil
    env = {**ENV, "DDPDOCTOR_TEST_TAG": f"stopped-{os.getpid()}"}
    env.pop("DDPDOCTOR_SMOKE_FAULT", None)
    tr = subprocess.Popen(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "ddpdoctor", "smoke", "--quick",
                           "--timeout", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=ROOT)
    stopped = None
    try:
        end = time.monotonic() + 60
        while stopped is None and time.monotonic() < end and tr.poll() is None:
            for c in psutil.Process(tr.pid).children():
                try:
                    if c.environ().get("RANK") == "1":
                        c.send_signal(signal.SIGSTOP)  # as a user would: `kill -STOP <rank 1's pid>`
                        stopped = c.pid
                except psutil.Error:
                    pass
            time.sleep(0.02)
        assert stopped, "rank 1 never started"
        verdict_at = None
        for line in tr.stdout:  # rank 0's report; its footer ends the verdict
            if " failed" in line and line.rstrip().endswith("s"):
                verdict_at = time.monotonic()
        tr.wait(60)
        prompt_after = time.monotonic() - verdict_at
        err = tr.stderr.read()
    finally:
        for p in [tr.pid, *(stopped and [stopped] or [])]:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        tr.wait(10)
    assert verdict_at is not None and tr.returncode != 0
    assert f"ending stopped rank 1 (pid {stopped}) after the verdict" in err
    assert prompt_after < 20, f"{prompt_after:.1f} s from the verdict to the prompt: torchrun's 30 s grace again?"
    assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_only_stopped_ranks_of_the_same_run_count_as_rank_0s_to_end(tmp_path):
    """Siblings under one parent (as torchrun's agent holds its ranks): a stopped rank of this run is
    found; a stopped one of another run, a running one, and a stopped non-smoke process are not."""
    script = tmp_path / "agent.py"
    script.write_text(
        "import os, signal, subprocess, sys, time, json\n"
        "base = {**os.environ, 'TORCHELASTIC_RUN_ID': 'r1', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '29999',\n"
        "        'WORLD_SIZE': '4'}\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(60)', 'ddpdoctor', 'smoke']\n"
        "kids = {name: subprocess.Popen(cmd, env={**base, **env}) for name, cmd, env in [\n"
        "    ('same-run-stopped', sleep, {'RANK': '1'}),\n"
        "    ('other-run-stopped', sleep, {'RANK': '2', 'TORCHELASTIC_RUN_ID': 'r2'}),\n"
        "    ('same-run-running', sleep, {'RANK': '3'}),\n"
        "    ('not-smoke-stopped', [sys.executable, '-c', 'import time; time.sleep(60)'], {'RANK': '1'})]}\n"
        "for name in ('same-run-stopped', 'other-run-stopped', 'not-smoke-stopped'):\n"
        "    kids[name].send_signal(signal.SIGSTOP)\n"
        "time.sleep(0.5)\n"
        "probe = subprocess.run([sys.executable, '-c', 'from ddpdoctor.smoke.siblings import stopped_local_ranks as s; "
        "print(s())'], env={**base, 'RANK': '0'}, capture_output=True, text=True)\n"
        "names = {p.pid: n for n, p in kids.items()}\n"
        "for p in kids.values():\n"
        "    p.kill(); p.wait()\n"
        "print(json.dumps([names[pid] for pid, _ in __import__('ast').literal_eval(probe.stdout or '[]')]), probe.stderr)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=ENV)
    assert json.loads(out.stdout.splitlines()[0]) == ["same-run-stopped"], out.stdout + out.stderr


def test_no_rank_output_section_without_output_to_show():
    """A failed rank whose captured output has nothing to read (blank lines, only torch's `[rank0]:`
    prefixes, terminal escapes) gets no heading over nothing; one with output keeps it."""
    from ddpdoctor.render import smoke as render_smoke
    from ddpdoctor.smoke.plan import SmokeConfig
    from ddpdoctor.smoke.report import build_report
    world = {"world_size": 2, "backend": "gloo", "records": {}, "verdict": None}
    quiet = build_report(world, SmokeConfig(), launcher="torchrun", env={},
                         logs={0: ["[rank0]:", "[rank0]:   ", "\x1b[0m"], 1: ["[rank1]: RuntimeError: boom"]})
    text = render_smoke.text(quiet)
    assert "rank 0 output" not in text
    assert "rank 1 output (last lines):\n  | [rank1]: RuntimeError: boom" in text


# --------------------------------------------------------------------------- explain --log a --log b: one conclusion

JOB = 'import os\nimport torch.distributed as dist\ndist.init_process_group("gloo")\n'


def _node(tmp_path, node_rank: int, port: int, env):
    log = open(tmp_path / f"node{node_rank}.log", "w")
    return subprocess.Popen(["torchrun", "--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1",
                             "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-conf", "timeout=5",
                             "job.py"], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_two_nodes_on_different_master_ports_get_one_joint_conclusion(tmp_path):
    """The user's mistake: node 0 and node 1 launched with different --master-port. Each log alone
    says something true but partial; together they say why."""
    (tmp_path / "job.py").write_text(JOB)
    env = {**ENV, "LOGLEVEL": "INFO"}  # torchrun then prints its launch configuration (rdzv_endpoint)
    p0, p1 = free_port(), free_port()
    procs = [_node(tmp_path, 0, p0, env), _node(tmp_path, 1, p1, env)]
    try:
        for p in procs:
            p.wait(90)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = ddpdoctor("explain", "--log", "node0.log", "--log", "node1.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    joint = out.stdout.split("all 2 logs together")[1]
    assert f"disagree on the rendezvous port (node0.log: {p0}, node1.log: {p1})" in joint
    assert "RANDOM" not in joint.replace("never $RANDOM", "")
    doc = json.loads(ddpdoctor("explain", "--log", "node0.log", "--log", "node1.log", "--json", cwd=tmp_path).stdout)
    assert doc["joint"]["confidence"] == "high" and len(doc["logs"]) == 2
    # the same port on both sides is no mismatch
    (tmp_path / "again.log").write_text((tmp_path / "node0.log").read_text())
    same = json.loads(ddpdoctor("explain", "--log", "node0.log", "--log", "again.log", "--json", cwd=tmp_path).stdout)
    assert "disagree on the rendezvous port" not in same["joint"]["conclusion"]


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_without_the_launch_configuration_no_port_mismatch_is_invented(tmp_path):
    """Without torchrun's INFO lines the store side's log shows no port: no joint port verdict is
    invented; the root cause in one log and the consequence in the other make the conclusion."""
    (tmp_path / "job.py").write_text(JOB)
    p0, p1 = free_port(), free_port()
    procs = [_node(tmp_path, 0, p0, ENV), _node(tmp_path, 1, p1, ENV)]
    for p in procs:
        p.wait(90)
    doc = json.loads(ddpdoctor("explain", "--log", "node0.log", "--log", "node1.log", "--json", cwd=tmp_path).stdout)
    j = doc["joint"]
    assert "disagree on the rendezvous port" not in j["conclusion"]
    assert j["conclusion"].startswith("the cause is in node1.log") and j["confidence"] == "medium"

"""`ddpdoctor explain` on the command line: pages, logs from files and stdin, JSON, bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

DD = [sys.executable, "-m", "ddpdoctor"]
LOGS = Path(__file__).resolve().parent / "logs"
LAB_LOG = LOGS / "HOSTNAME_RESOLVES_TO_LOOPBACK" / "lab-loopback-c10d.log"


def run(*args, stdin=None, env=None):
    e = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    e.update(env or {})
    return subprocess.run([*DD, *args], input=stdin, capture_output=True, timeout=60, env=e)


def test_explain_failure_id_prints_its_page_case_insensitively():
    p = run("explain", "hostname_resolves_to_loopback")
    out = p.stdout.decode()
    assert p.returncode == 0
    assert out.startswith("# HOSTNAME_RESOLVES_TO_LOOPBACK:") and "## Fix" in out and "DD202" in out


def test_explain_check_still_prints_its_page_with_the_failures_it_catches():
    out = run("explain", "DD302").stdout.decode()
    assert "## What it checks" in out and "GLOO_SOCKET_IFNAME_INVALID" in out


def test_explain_id_json():
    d = json.loads(run("explain", "FIREWALL_BLOCKS_PORTS", "--json").stdout)
    assert d["failure"]["id"] == "FIREWALL_BLOCKS_PORTS" and "DD103" in d["failure"]["checks"]
    assert d["failure"]["signatures"] and d["failure"]["fix"]["summary"]
    d = json.loads(run("explain", "DD102", "--json").stdout)
    assert d["check"]["id"] == "DD102" and "FIREWALL_BLOCKS_PORTS" in d["check"]["failures"]


def test_explain_log_names_cause_evidence_fix_and_confirm():
    p = run("explain", "--log", str(LAB_LOG))
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr
    assert "1. HOSTNAME_RESOLVES_TO_LOOPBACK" in out
    assert "line " in out and "remote=[127.0.1.1]" in out
    assert "fix: " in out and "confirm: ddpdoctor network --master node1" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_explain_log_json_contract():
    p = run("explain", "--log", str(LAB_LOG), "--json")
    d = json.loads(p.stdout)
    assert d["command"] == "explain" and d["schema"] == 1 and d["exit_code"] == 0
    first = d["diagnoses"][0]
    assert first["failure"] == "HOSTNAME_RESOLVES_TO_LOOPBACK"
    assert 0 < first["confidence"] <= 1
    ev = first["evidence"][0]
    assert isinstance(ev["line"], int) and "127.0.1.1" in ev["text"]
    assert first["fix"]["summary"] and isinstance(first["fix"]["commands"], list)
    assert first["confirm"].startswith("ddpdoctor network --master node1")
    assert d["lines"] == len(LAB_LOG.read_bytes().splitlines())


def test_explain_log_from_stdin():
    p = run("explain", "--log", "-", stdin=LAB_LOG.read_bytes())
    assert p.returncode == 0 and b"HOSTNAME_RESOLVES_TO_LOOPBACK" in p.stdout


@pytest.mark.parametrize("data", [b"", b"\x00\xff\xfe\x80" * 5000, b"all good\nepoch 3 done\n"])
def test_log_without_a_known_signature_says_so_and_exits_0(data):
    p = run("explain", "--log", "-", stdin=data)
    assert p.returncode == 0, p.stderr
    assert b"No known failure signature" in p.stdout and p.stderr == b""


@pytest.mark.parametrize("args", [
    ["explain", "--log", "/nonexistent/job.log"],
    ["explain", "--log", "/"],
    ["explain", "NO_SUCH_FAILURE"],
    ["explain", "DD999"],
    ["explain", "FIREWALL_BLOCKS_PORTS", "--log", "x.log"],
    ["explain"],
])
def test_bad_input_is_one_line_and_exit_2(args):
    p = run(*args)
    assert p.returncode == 2, p.stdout
    err = p.stderr.decode()
    assert len(err.strip().splitlines()) == 1 and err.startswith("ddpdoctor: error:"), err
    assert "Traceback" not in err


def test_unknown_id_suggests_the_closest():
    err = run("explain", "HOSTNAME_LOOPBACK").stderr.decode()
    assert "did you mean HOSTNAME_RESOLVES_TO_LOOPBACK" in err


def test_list_names_every_failure_mode():
    from ddpdoctor import catalog
    out = run("explain", "--list").stdout.decode()
    assert all(i in out for i in catalog.failures())

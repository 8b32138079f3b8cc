"""Bad input gets one clear line and exit 2, never a traceback; nothing runs through a shell."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torchjob  # real processes: the CLI as a subprocess (tests/conftest.py)

DD = [sys.executable, "-m", "ddpdoctor"]


def run(*args, env=None, timeout=30):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*DD, *args], capture_output=True, text=True, timeout=timeout, env=e)


@pytest.mark.parametrize("args", [
    ["network", "--master", "a;touch /tmp/ddpdoctor-pwned"],
    ["network", "--master", "$(reboot)"],
    ["network", "--master", ""],
    ["network", "--master", "fd00::1::2"],
    ["network", "--master", "[fe80::1]"],          # link-local without a scope id
    ["network", "--master", "fe80::1%a;b"],
    ["network", "--master", "[fd00::1]:29400", "--port", "29500"],
    ["network", "--master", "[node1]:29400"],
    ["network", "--master", "node1", "--port", "0"],
    ["network", "--master", "node1", "--port", "70000"],
    ["network", "--master", "node1", "--port", "29x"],
    ["network", "--master", "a" * 300],
    ["network", "--master", "bad_label-.com"],
    ["network", "--master", "300.1.2.3"],
    ["network", "--master", "node1", "--probe-timeout", "-1"],
    ["network", "--listen", "--expect", "0"],
    ["network", "--expect", "2"],
    ["network", "--bogus-flag"],
    ["explain", "DD999"],
    ["nosuchcommand"],
])
def test_bad_input_is_one_line_and_exit_2(args):
    p = run(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("ddpdoctor: error:"), p.stderr
    assert not os.path.exists("/tmp/ddpdoctor-pwned")


def test_help_and_network_never_import_torch():
    code = ("import sys, runpy; sys.argv=['ddpdoctor','--help'];\n"
            "try:\n    runpy.run_module('ddpdoctor', run_name='__main__')\nexcept SystemExit: pass\n"
            "sys.argv=['ddpdoctor','network','--select','DD2','--json'];\n"
            "try:\n    runpy.run_module('ddpdoctor', run_name='__main__')\nexcept SystemExit: pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NOTORCH', file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().endswith("NOTORCH"), p.stderr


def test_version_list_and_explain():
    assert run("--version").stdout.startswith("ddpdoctor, version")
    out = run("list-checks").stdout
    assert "DD201" in out and "DD303" in out
    page = run("explain", "dd201").stdout
    assert "## What it checks" in page and "## Fix" in page and "DD201" in page


def test_malformed_env_is_a_finding_not_a_crash():
    p = run("network", "--json", "--select", "DD8", env={"MASTER_ADDR": "1720.30.23.101", "MASTER_PORT": "99999",
                                                        "RANK": "x", "NCCL_SOCKET_INAME": "eth0"})
    assert p.returncode == 1, p.stderr
    import json
    d = json.loads(p.stdout)
    msgs = [f["message"] for r in d["results"] for f in r["findings"]]
    assert any("1720" in m and "not an octet" in m for m in msgs)
    assert any("MASTER_PORT='99999'" in m for m in msgs)
    assert any("RANK='x' is not an integer" in m for m in msgs)
    assert any("did you mean NCCL_SOCKET_IFNAME" in m for m in msgs)

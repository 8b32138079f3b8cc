"""Every suggested command that edits a file, run as a user pastes it, on copies of real layouts.

Each command runs in bash, as root, in a private mount namespace whose /etc is an overlay over the
real one (the real /etc never changes): /etc/hosts is a copy of a real layout, bind-mounted the way
Docker mounts it (where `sed -i` fails) or a plain file. glibc's own resolver (`getent -s files`)
then says what every name in the file resolves to, before and after: only the names the fix means
to move may change.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from ddpdoctor import registry
from ddpdoctor.checks import hostsfile
from ddpdoctor.checks.system import SLURM_CONF_MEMLOCK
from ddpdoctor.facts.network import NetworkFacts
from ddpdoctor.model import Severity
from ddpdoctor.probes.dns import Resolution
from ddpdoctor.probes.nics import Nic
from ddpdoctor.probes.sockets import OPEN, Route, TcpProbe
from ddpdoctor.runner import run_checks

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("getent"),
    reason="needs root, unshare and getent (a private mount namespace over /etc)")

ROUTABLE = "198.18.1.2"
LO = Nic("lo", True, ("127.0.0.1",), ("::1",), 65536, 0)
ETH0 = Nic("eth0", True, (ROUTABLE,), (), 1500, 0)

# Real layouts, as their installers write them (plus the hostname where users and tools put it).
DEBIAN = ("127.0.0.1\tlocalhost\n127.0.1.1\tvm.example.com\tvm\n\n"
          "# The following lines are desirable for IPv6 capable hosts\n"
          "::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\n")
DEBIAN_SHORT = "127.0.0.1\tlocalhost\n127.0.1.1\tvm\n\n::1     localhost ip6-localhost ip6-loopback\n"
RHEL = ("127.0.0.1   localhost localhost.localdomain localhost4 localhost4.localdomain4 vm\n"
        "::1         localhost localhost.localdomain localhost6 localhost6.localdomain6 vm\n")
CLOUD_INIT = ("# Your system has configured 'manage_etc_hosts' as True.\n"
              "# As a result, if you wish for changes to this file to persist\n"
              "# then you will need to either\n"
              "# a.) make changes to the master file in /etc/cloud/templates/hosts.debian.tmpl\n"
              "# b.) change or remove the value of 'manage_etc_hosts' in\n"
              "#     /etc/cloud/cloud.cfg or cloud-config from user-data\n#\n"
              "127.0.1.1 ip-10-0-0-5.ec2.internal ip-10-0-0-5\n127.0.0.1 localhost\n\n"
              "# The following lines are desirable for IPv6 capable hosts\n"
              "::1 ip6-localhost ip6-loopback\nfe00::0 ip6-localnet\nff00::0 ip6-mcastprefix\n"
              "ff02::1 ip6-allnodes\nff02::2 ip6-allrouters\nff03::1 ip6-allhosts\n")
DOCKER = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
          "ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n127.0.0.1\t3f4e5d6c7b8a\n")
# a hyphenated name among names that contain it, a commented-out entry, a comment after the names,
# upper case (glibc compares names case-insensitively), no newline at the end of the file
LOOKALIKES = ("127.0.0.1 localhost gpu-node-1.cluster.local gpu-node-1 gpu-node-10 my-gpu-node-1 # gpu-node-1 here\n"
              "# 127.0.1.1 gpu-node-1\n10.0.0.10 gpu-node-10\n127.0.1.1 GPU-NODE-1\t# set by the installer")
DOTTED = "127.0.0.1 localhost node1.cluster node1xcluster node1\n::1 localhost node1.cluster\n"

CASES = [  # (layout, hostname, names that must keep their addresses)
    (DEBIAN, "vm", ("localhost", "vm.example.com", "ip6-localhost", "ip6-allnodes")),
    (DEBIAN_SHORT, "vm", ("localhost", "ip6-loopback")),
    (RHEL, "vm", ("localhost", "localhost.localdomain", "localhost4", "localhost6.localdomain6")),
    (CLOUD_INIT, "ip-10-0-0-5", ("localhost", "ip-10-0-0-5.ec2.internal", "ip6-localhost", "ip6-allhosts")),
    (DOCKER, "3f4e5d6c7b8a", ("localhost", "ip6-localhost", "ip6-allrouters")),
    (LOOKALIKES, "gpu-node-1", ("localhost", "gpu-node-1.cluster.local", "gpu-node-10", "my-gpu-node-1")),
    (DOTTED, "node1.cluster", ("localhost", "node1xcluster", "node1")),
]


def _paste(commands, *, hosts: str, bind: bool, names=(), files: dict | None = None, env: str = ""):
    """Run `commands` one by one as pasted into a root shell (`sudo` as a no-op, the way root runs it),
    /etc/hosts holding `hosts`; return (per-command exit codes, getent before, getent after, final
    /etc/hosts, the backup if one was written, {path: final text} of `files`)."""
    work = tempfile.mkdtemp(prefix="ddpd-fix-")
    try:
        for d in ("upper", "work"):
            os.mkdir(os.path.join(work, d))
        with open(os.path.join(work, "hosts"), "w") as f:
            f.write(hosts)
        lines = ["set -u", "sudo() { \"$@\"; }",
                 f"mount -t overlay overlay -o lowerdir=/etc,upperdir={work}/upper,workdir={work}/work /etc",
                 (f"touch /etc/hosts && mount --bind {work}/hosts /etc/hosts" if bind
                  else f"cp {work}/hosts /etc/hosts"),
                 "rm -f /etc/hosts.ddpdoctor.bak"]
        for path, text in (files or {}).items():
            with open(os.path.join(work, "f" + path.replace("/", "_")), "w") as f:
                f.write(text)
            lines.append(f"mkdir -p {os.path.dirname(path)} && cp {work}/f{path.replace('/', '_')} {path}")
        lookup = [f"echo \"@{n} $(getent -s files ahosts {n} | awk '{{print $1}}' | sort -u | tr '\\n' ' ')\""
                  for n in names]
        lines += ["echo '#before'", *lookup]
        for i, c in enumerate(commands):
            lines.append(f"( {env}\n{c}\n ) </dev/null; echo \"#rc{i} $?\"")
        lines += ["echo '#after'", *lookup, "echo '#hosts'", "cat /etc/hosts", "echo '#backup'",
                  "cat /etc/hosts.ddpdoctor.bak 2>/dev/null"]
        for path in files or {}:
            lines += [f"echo '#file {path}'", f"cat {path}"]
        p = subprocess.run(["unshare", "-m", "bash", "-c", "\n".join(lines)], capture_output=True, text=True,
                           timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sections, cur = {}, None
    for line in p.stdout.split("\n"):
        if line.startswith("#before") or line.startswith("#after") or line.startswith("#hosts") \
                or line.startswith("#backup") or line.startswith("#file ") or line.startswith("#rc"):
            if line.startswith("#rc"):
                k, rc = line.split()
                sections.setdefault("rc", []).append(int(rc))
                continue
            cur = line[1:]
            sections[cur] = []
            continue
        if cur:
            sections[cur].append(line)
    def table(k):
        return {ln.split()[0][1:]: tuple(ln.split()[1:]) for ln in sections.get(k, []) if ln.startswith("@")}
    assert "hosts" in sections, p.stderr
    text = lambda k: "\n".join(sections.get(k, [])).rstrip("\n")  # noqa: E731
    return (sections.get("rc", []), table("before"), table("after"), text("hosts"), text("backup"),
            {path: text(f"file {path}") for path in files or {}}, p.stderr)


def _dd202_fix(hostname: str):
    f = NetworkFacts("node0", 29400, env={}, hostname=hostname)
    f.__dict__.update(nics=[LO, ETH0], local_res=Resolution(hostname, ("127.0.1.1",)), fqdn=hostname,
                      master_res=Resolution("node0", ("198.18.1.1",)), route=Route("198.18.1.1", ROUTABLE),
                      tcp=TcpProbe("198.18.1.1", 29400, OPEN, 0.001))
    (res,) = run_checks([registry.get("DD202")], f, deadline=5)
    (finding,) = res.findings
    assert finding.severity is Severity.ERROR
    return finding.fix


@pytest.mark.parametrize("layout,hostname,others", CASES,
                         ids=["debian", "debian-short", "rhel", "cloud-init", "docker", "lookalikes", "dotted"])
@pytest.mark.parametrize("bind", [True, False], ids=["docker-bind-mount", "plain-file"])
@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd202_fix_moves_only_the_hostname_off_loopback(layout, hostname, others, bind):
    fix = _dd202_fix(hostname)
    assert len(fix.commands) == 2, fix.commands  # remove the name from loopback lines, then add the routable line
    rc, before, after, hosts, backup, _, err = _paste(fix.commands, hosts=layout, bind=bind,
                                                      names=(hostname, *others))
    assert rc == [0, 0], err
    assert any(a.startswith("127.") or a == "::1" for a in before[hostname])  # the fault was there
    assert after[hostname] == (ROUTABLE,), hosts  # now only the routable address, in both families
    for name in others:
        assert after[name] == before[name], f"{name} changed:\n{hosts}"
    assert backup == layout.rstrip("\n")
    kept = [ln for ln in layout.splitlines() if ln.lstrip().startswith("#")]
    assert all(ln in hosts.splitlines() for ln in kept), "a comment line changed"


def test_dd202_suggests_no_command_for_a_name_that_is_unsafe_in_a_shell():
    fix = _dd202_fix("vm;reboot")
    assert not any("sed" in c for c in fix.commands) and not any("reboot" in c for c in fix.commands)


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_plain_sed_i_would_have_failed_on_dockers_bind_mount():
    """Why the command rewrites with cp: the documented fault this guards against is real here."""
    rc, *_ = _paste(["sed -i 's/x/y/' /etc/hosts"], hosts=DOCKER, bind=True)
    assert rc != [0]


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd203_fix_replaces_a_stale_mapping_instead_of_appending_behind_it():
    f = NetworkFacts("node0", 29400, env={}, hostname="vm")
    f.__dict__.update(nics=[LO, ETH0], local_res=Resolution("vm", ("10.9.9.9",)), fqdn="vm",
                      master_res=Resolution("node0", ("198.18.1.1",)), route=Route("198.18.1.1", ROUTABLE))
    (res,) = run_checks([registry.get("DD203")], f, deadline=5)
    fix = res.findings[0].fix
    layout = "127.0.0.1 localhost\n10.9.9.9 vm vm-old\n10.9.9.99 vm2\n"
    rc, before, after, hosts, *_ = _paste(fix.commands, hosts=layout, bind=False, names=("vm", "vm-old", "vm2"))
    assert rc == [0, 0] and before["vm"] == ("10.9.9.9",)
    assert after["vm"] == (ROUTABLE,) and after["vm-old"] == ("10.9.9.9",) and after["vm2"] == ("10.9.9.99",), hosts


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd201_fix_appends_even_behind_a_last_line_without_newline():
    f = NetworkFacts("node0", 29400, env={}, hostname="vm")
    f.__dict__.update(nics=[LO, ETH0], local_res=Resolution("vm", (), "[Errno -2] Name or service not known"),
                      fqdn="vm", master_res=Resolution("node0", ("198.18.1.1",)), route=Route("198.18.1.1", ROUTABLE))
    (res,) = run_checks([registry.get("DD201")], f, deadline=5)
    layout = "127.0.0.1 localhost\n198.18.1.1 node0"  # no newline at the end
    rc, _, after, hosts, *_ = _paste(res.findings[0].fix.commands, hosts=layout, bind=True,
                                     names=("vm", "node0", "localhost"))
    assert rc == [0] and after == {"vm": (ROUTABLE,), "node0": ("198.18.1.1",), "localhost": ("127.0.0.1",)}, hosts


def _dd205_fix():
    f = NetworkFacts("node1", 29400, env={}, hostname="node2")
    f.__dict__.update(master_res=Resolution("node1", (), "[Errno -2] Name or service not known"))
    (res,) = run_checks([registry.get("DD205")], f, deadline=5)
    return res.findings[0].fix


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd205_fix_refuses_to_run_until_the_address_is_set():
    (cmd,) = _dd205_fix().commands
    layout = "127.0.0.1 localhost\n"
    *_, hosts, _, _, err = _paste([cmd], hosts=layout, bind=False)
    assert hosts == layout.rstrip("\n") and "set MASTER_IP to the address of node1 first" in err  # nothing written
    rc, _, after, hosts, *_ = _paste([cmd], hosts=layout, bind=False, names=("node1",), env="MASTER_IP=198.18.1.1")
    assert rc == [0] and after["node1"] == ("198.18.1.1",), hosts


GAI_DEBIAN_TAIL = ("# Configuration for getaddrinfo(3).\n#\n#precedence  ::1/128       50\n"
                   "#precedence  ::/0          40\n#precedence  2002::/16     30\n#precedence ::/96          20\n"
                   "#precedence ::ffff:0:0/96  10\n#\n#    For sites which prefer IPv4 connections change the last line to\n"
                   "#\n#precedence ::ffff:0:0/96  100")  # Debian ships it with this last line; here without newline


@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd210_gai_conf_line_lands_on_its_own_line():
    cmd = next(c for c in _dd210_fix().commands if "gai.conf" in c)
    rc, _, _, _, _, files, err = _paste([cmd], hosts="127.0.0.1 localhost\n", bind=False,
                                        files={"/etc/gai.conf": GAI_DEBIAN_TAIL})
    assert rc == [0], err
    lines = files["/etc/gai.conf"].splitlines()
    assert lines[:len(GAI_DEBIAN_TAIL.splitlines())] == GAI_DEBIAN_TAIL.splitlines()  # nothing before changed
    assert [ln for ln in lines if ln.startswith("precedence")] == ["precedence ::ffff:0:0/96 100"]


def _dd210_fix():
    from ddpdoctor.probes.sockets import FILTERED
    f = NetworkFacts("node1", 29400, env={}, hostname="node2")
    f.__dict__.update(master_res=Resolution("node1", ("fd00::1", "198.18.1.1")), master_literal=False,
                      master_is_local=False, c10d_order=Resolution("node1", ("fd00::1", "198.18.1.1")),
                      family_probes={"fd00::1": TcpProbe("fd00::1", 29400, FILTERED, 2.0),
                                     "198.18.1.1": TcpProbe("198.18.1.1", 29400, OPEN, 0.001)})
    (res,) = run_checks([registry.get("DD210")], f, deadline=5)
    return res.findings[0].fix


SLURM_CONF = "ClusterName=lab\nSlurmctldHost=head\n#PropagateResourceLimits=\n#PropagateResourceLimitsExcept=\nProctrackType=proctrack/linuxproc"


@pytest.mark.parametrize("conf,expect_line", [
    (SLURM_CONF, "PropagateResourceLimitsExcept=MEMLOCK"),  # template lines commented: append (after a newline)
    (SLURM_CONF + "\nPropagateResourceLimits=NONE\n", None),  # already set: printed, never a second, clashing line
    (SLURM_CONF + "\npropagateresourcelimitsexcept=NOFILE\n", None),
])
@pytest.mark.torchjob  # a real process on this machine (tests/conftest.py)
def test_dd603_slurm_conf_line_never_clashes_with_an_existing_setting(conf, expect_line):
    rc, _, _, _, _, files, err = _paste([SLURM_CONF_MEMLOCK], hosts="127.0.0.1 localhost\n", bind=False,
                                        files={"/etc/slurm/slurm.conf": conf})
    assert rc == [0], err
    out = files["/etc/slurm/slurm.conf"]
    if expect_line:
        assert out.splitlines()[-1] == expect_line and out.startswith(conf)
    else:
        assert out == conf.rstrip("\n")


def test_every_fix_that_edits_a_file_goes_through_the_tested_builders():
    """A new finding that writes `>> /etc/...`, `sed -i` or `tee` by hand would bypass the tests above."""
    import pathlib
    import re
    root = pathlib.Path(registry.__file__).parent / "checks"
    raw = re.compile(r"""(>>\s*/etc/|sed -i|\btee\b)""")
    offenders = [f"{p.name}:{i}" for p in root.glob("*.py") if p.name != "hostsfile.py"
                 for i, ln in enumerate(p.read_text().splitlines(), 1)
                 if raw.search(ln) and not ln.lstrip().startswith("#") and "SLURM_CONF_MEMLOCK" not in ln
                 and "tee -a /etc/slurm/slurm.conf" not in ln]
    assert not offenders, offenders

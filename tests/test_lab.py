"""Proofs that the network lab (tests/lab.py) is what it claims to be."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import lab as labmod
from lab import Lab, LabTimeout, netns_pids, run_torchrun_job

PY = sys.executable

CONNECT = textwrap.dedent(
    """
    import socket, sys, time
    t = time.monotonic()
    s = socket.socket(); s.settimeout(float(sys.argv[3]))
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        print("CONNECTED")
    except socket.timeout:
        print("TIMEOUT %.1f" % (time.monotonic() - t))
    except OSError as e:
        print("ERROR %s %s" % (e.errno, e.strerror))
    """
)

LISTEN = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(16)
    print("listening", flush=True)
    conns = []
    while True:
        conns.append(s.accept()[0])
    """
)


def _listen(lab, node, port):
    p = lab.popen(node, [PY, "-c", LISTEN, str(port)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "listening"
    return p


def _connect(lab, node, host, port, timeout=1.0):
    return lab.run(node, [PY, "-c", CONNECT, host, str(port), str(timeout)], timeout=30).stdout.strip()


def test_hostname_hosts_and_mounts_are_per_node(lab):
    host_hostname = os.uname().nodename
    host_hosts = open("/etc/hosts").read()
    for node in lab.nodes:
        assert node.iface == "eth0" and node.ns.startswith(f"ddl{lab.id}-")
        assert lab.run(node.name, ["hostname"], timeout=10).stdout.strip() == node.name
        hosts = lab.run(node.name, ["cat", "/etc/hosts"], timeout=10).stdout
        assert "127.0.0.1 localhost" in hosts
        for other in lab.nodes:
            assert f"{other.addr} {other.name}" in hosts
        r = lab.run(node.name, ["getent", "hosts", "node2"], timeout=10)
        assert r.stdout.split()[0] == lab.addr("node2")
        # python in the node sees the same (hostname, resolution of its own name)
        r = lab.run(node.name, [PY, "-c", "import socket; n=socket.gethostname(); print(n, socket.gethostbyname(n))"],
                    timeout=10)
        assert r.stdout.split() == [node.name, node.addr]
        # no default route; the only route is the lab subnet
        routes = lab.run(node.name, ["ip", "route"], timeout=10).stdout
        assert "default" not in routes and str(lab.subnet) in routes
    assert os.uname().nodename == host_hostname
    assert open("/etc/hosts").read() == host_hosts


def test_set_hosts_in_place_seen_by_running_node(lab):
    path = lab.node("node2").etc_dir / "hosts"
    ino = os.stat(path).st_ino
    # A process that is already running in node2 sees the rewrite.
    watcher = lab.popen("node2", [PY, "-c", "import sys,socket; sys.stdin.readline();"
                                            "\ntry: print(socket.gethostbyname('node1'))"
                                            "\nexcept OSError as e: print('ERR', e)"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lab.set_hosts("node2", {"node2": lab.addr("node2")})
    assert os.stat(path).st_ino == ino
    out, _ = watcher.communicate("go\n", timeout=10)
    assert out.startswith("ERR") and "Name or service not known" in out
    assert lab.run("node2", ["getent", "hosts", "node1"], timeout=10).returncode == 2
    lab.set_hosts("node2", ["127.0.0.1 localhost", "198.18.255.9 node1 node1.example"])
    assert lab.run("node2", ["getent", "hosts", "node1.example"], timeout=10).stdout.split()[0] == "198.18.255.9"
    # node1 is unaffected
    assert lab.run("node1", ["getent", "hosts", "node1"], timeout=10).stdout.split()[0] == lab.addr("node1")


def test_ping_between_nodes_and_nothing_outside(lab):
    r = lab.run("node1", ["ping", "-c", "1", "-W", "2", "node2"], timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
    r = lab.run("node2", ["ping", "-c", "1", "-W", "2", lab.addr("node1")], timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr
    # Outside the lab subnet there is no route at all.
    assert _connect(lab, "node1", "198.18.255.254", 9) == "ERROR 101 Network is unreachable"


def test_iptables_drop_makes_connect_time_out_and_reject_refuses(lab):
    _listen(lab, "node2", 29400)
    assert _connect(lab, "node1", "node2", 29400) == "CONNECTED"
    lab.iptables("node2", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "29400", "-j", "DROP")
    out = _connect(lab, "node1", "node2", 29400, timeout=1.0)
    assert out.startswith("TIMEOUT"), out
    # The rule filters only what comes in on eth0: node2 itself still connects.
    assert _connect(lab, "node2", "node2", 29400) == "CONNECTED"
    lab.iptables("node2", "-F", "INPUT")
    lab.iptables("node2", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "29400", "-j", "REJECT")
    assert _connect(lab, "node1", "node2", 29400) == "ERROR 111 Connection refused"
    assert "29400" in lab.iptables("node2", "-S", "INPUT").stdout
    assert "29400" not in lab.iptables("node1", "-S", "INPUT").stdout


def test_decoy_is_local_only(lab):
    cidr = lab.decoy_cidr(2)
    decoy = cidr.split("/")[0]
    lab.add_decoy("node2", "docker0", cidr)
    assert decoy in lab.run("node2", ["ip", "-br", "addr", "show", "docker0"], timeout=10).stdout
    _listen(lab, "node2", 29500)
    assert _connect(lab, "node2", decoy, 29500) == "CONNECTED"
    assert _connect(lab, "node1", decoy, 29500) == "ERROR 101 Network is unreachable"
    assert lab.run("node1", ["ping", "-c", "1", "-W", "1", decoy], timeout=10).returncode != 0
    # low decoys sort below every node address, high ones above; none is routed
    high = lab.decoy_cidr(3, "high").split("/")[0]
    lab.add_decoy("node2", "decoy1", lab.decoy_cidr(3, "high"))
    assert _connect(lab, "node1", high, 29500) == "ERROR 101 Network is unreachable"
    key = lambda a: tuple(map(int, a.split(".")))  # noqa: E731
    assert key(decoy) < min(key(n.addr) for n in lab.nodes) <= max(key(n.addr) for n in lab.nodes) < key(high)
    with pytest.raises(ValueError):
        lab.add_decoy("node1", "x" * 16, cidr)
    with pytest.raises(ValueError):
        lab.add_decoy("node1", "decoy1", "10.0.0.1/24")


def test_run_timeout_kills_detached_descendants(lab):
    # The child starts a grandchild in its own session (like torchrun's workers), then hangs.
    script = ("import subprocess, sys, time\n"
              "subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
              "print('started', flush=True); time.sleep(1000)")
    t = time.monotonic()
    with pytest.raises(LabTimeout) as ei:
        lab.run("node1", [PY, "-c", script], timeout=1.5)
    assert time.monotonic() - t < 10
    assert "started" in ei.value.stdout and ei.value.node == "node1"
    holder = lab.node("node1").holder_pid
    assert netns_pids(lab.node("node1").ns) == [holder]
    assert lab.run("node1", ["hostname"], timeout=10).stdout.strip() == "node1"


def test_kill_all_and_ip_netns_pids_agree(lab):
    for _ in range(3):
        lab.popen("node2", ["sleep", "1000"])
    # a child that leaves the session it was started in, as torchrun's workers do
    p = lab.popen("node2", [PY, "-c", "import os,time\nif os.fork() == 0:\n    os.setsid(); print('up', flush=True)\n"
                                       "time.sleep(1000)"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    ns = lab.node("node2").ns
    # popen returns before nsenter has exec'd everything: compare once the namespace is settled
    deadline = time.monotonic() + 10
    while True:
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True).stdout.split()
        ours = netns_pids(ns)
        if (len(listed) == 6 and sorted(map(int, listed)) == sorted(ours)) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sorted(map(int, listed)) == sorted(ours)
    assert len(listed) == 6  # holder + 3 sleeps + the python and its setsid child
    lab.kill_all("node2")
    assert netns_pids(ns) == [lab.node("node2").holder_pid]
    assert lab.run("node2", ["hostname"], timeout=10).stdout.strip() == "node2"


def test_mount_tmpfs_only_inside_node(lab):
    host_shm = os.statvfs("/dev/shm")
    lab.mount_tmpfs("node1", "/dev/shm", "64M")
    df1 = lab.run("node1", ["df", "-k", "--output=size,fstype", "/dev/shm"], timeout=10).stdout.split()
    assert df1[-2:] == ["65536", "tmpfs"], df1
    lab.run("node1", ["touch", "/dev/shm/lab-marker"], timeout=10, check=True)
    assert not os.path.exists("/dev/shm/lab-marker")
    assert lab.run("node2", ["test", "-e", "/dev/shm/lab-marker"], timeout=10).returncode == 1
    assert os.statvfs("/dev/shm").f_blocks == host_shm.f_blocks
    with pytest.raises(labmod.LabError):
        lab.mount_tmpfs("node1", "/nonexistent-lab-dir", "1M")


def _leftovers(lab_id: str, pids=()):
    out = []
    out += [n for n in os.listdir("/run/netns") if n.startswith(f"ddl{lab_id}")] if os.path.isdir("/run/netns") else []
    out += [d for d in os.listdir("/etc/netns") if d.startswith(f"ddl{lab_id}")] if os.path.isdir("/etc/netns") else []
    ipl = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [l for l in ipl.splitlines() if l.startswith(f"ddl{lab_id}")]
    out += [p.name for p in labmod.LOCK_DIR.glob("slot-*.lock") if (labmod._read_lock(p) or {}).get("id") == lab_id]
    out += [f"pid {p}" for p in pids if labmod._proc_start_time(p) is not None]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [l for l in links.splitlines() if f"ddl{lab_id}" in l]
    return out


def test_close_leaves_nothing(make_lab):
    lab = make_lab(("a", "b", "c"))
    lab_id = lab.id
    assert len(_leftovers(lab_id)) > 0
    p = lab.popen("b", [PY, "-c", "import os,time; os.setsid(); time.sleep(1000)"])
    pids = [p.pid] + [n.holder_pid for n in lab.nodes]
    lab.close()
    lab.close()  # idempotent
    assert _leftovers(lab_id, pids) == []
    with pytest.raises(labmod.LabError):
        lab.run("a", ["true"], timeout=5)


def test_parallel_labs_are_isolated(make_lab):
    a, b = make_lab(), make_lab()
    assert a.id != b.id and not a.subnet.overlaps(b.subnet)
    assert a.node("node1").ns != b.node("node1").ns
    _listen(b, "node1", 29400)
    assert _connect(b, "node2", "node1", 29400) == "CONNECTED"
    assert _connect(a, "node2", b.addr("node1"), 29400) == "ERROR 101 Network is unreachable"


CRASHER = textwrap.dedent(
    """
    import sys, os
    sys.path.insert(0, sys.argv[1])
    import lab
    l = lab.Lab(("x1", "x2"))
    p = l.popen("x1", ["sleep", "1000"])
    print(l.id, p.pid, flush=True)
    os.kill(os.getpid(), 9)
    """
)


def test_crashed_owner_is_cleaned_up(lab):
    # The `lab` fixture guarantees root/netns; the crash happens in a child process.
    child = subprocess.Popen([PY, "-c", CRASHER, os.path.dirname(labmod.__file__)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    crashed_id, sleeper = out.split()
    sleeper = int(sleeper)
    # The orphaned holders kill what ran in their nodes within ~1 s.
    deadline = time.monotonic() + 10
    while labmod._proc_start_time(sleeper) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert labmod._proc_start_time(sleeper) is None
    # Namespaces + lock stay until a stale cleanup.  Another test process may run that
    # cleanup (any Lab() does) and even reuse the slot, so look under the allocation lock.
    with labmod._alloc_lock():
        if any((labmod._read_lock(p) or {}).get("pid") == child.pid for p in labmod.LOCK_DIR.glob("slot-*.lock")):
            assert _leftovers(crashed_id) != []
            assert crashed_id in labmod._cleanup_stale_locked()
        assert _leftovers(crashed_id) == []  # cleaned by us or by another process's Lab()
    assert lab.id not in labmod.cleanup_stale()  # a live lab is never touched
    assert lab.run("node1", ["hostname"], timeout=10).stdout.strip() == "node1"


def test_argv_must_be_a_list(lab):
    with pytest.raises(TypeError):
        lab.run("node1", "hostname", timeout=5)
    with pytest.raises(KeyError):
        lab.node("nope")


def test_bad_node_names_rejected():
    with pytest.raises(ValueError):
        Lab(("Node_1",))
    with pytest.raises(ValueError):
        Lab(("n1", "n1"))
    with pytest.raises(ValueError):
        Lab(hosts="some")


@pytest.mark.parametrize("rdzv", ["c10d", "static"])
def test_healthy_two_node_torchrun_job(lab, rdzv):
    r = run_torchrun_job(lab, master="node1", rdzv=rdzv, job_timeout=15, wall_timeout=90)
    assert r.ok, r.summary() + "\n" + "\n".join(f"--- {n}\n{o[-3000:]}" for n, o in r.output.items())
    assert not r.timed_out and r.rc == {"node1": 0, "node2": 0}
    for n in ("node1", "node2"):
        assert "ALLREDUCE OK" in r.output[n] and "sum=3" in r.output[n] and f"host={n}" in r.output[n]


def test_unavailable_policy(monkeypatch):
    import conftest

    monkeypatch.delenv("DDPDOCTOR_REQUIRE_LAB", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no netns here"):
        conftest.lab_unavailable("no netns here")
    monkeypatch.setenv("DDPDOCTOR_REQUIRE_LAB", "1")
    with pytest.raises(pytest.fail.Exception, match="DDPDOCTOR_REQUIRE_LAB=1"):
        conftest.lab_unavailable("no netns here")


def test_lab_unavailable_raises_clearly(monkeypatch):
    monkeypatch.setattr(labmod, "_AVAILABLE", (False, "the lab needs root"))
    with pytest.raises(labmod.LabUnavailable, match="needs root"):
        Lab()

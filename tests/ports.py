"""A free TCP port on loopback for a test server (bound once by the kernel, then released), and a process
that listens where a torch rank does."""
from __future__ import annotations

import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_standin(*binds: tuple[str, str]) -> tuple[subprocess.Popen, list[int]]:
    """A real process that looks like a rank running torch's debug server from outside: a thread named
    pt_workerserver (as control_plane/WorkerServer.cpp names its own) and listeners where torch's ranks
    have them, each (family, address) on port 0. (process, ports); the caller kills it."""
    code = ("import socket,threading,time,ctypes\n"
            "def named():\n"
            "    ctypes.CDLL(None).prctl(15, b'pt_workerserver', 0, 0, 0)\n"   # PR_SET_NAME
            "    time.sleep(60)\n"
            "threading.Thread(target=named, daemon=True).start()\n"
            "for fam, addr in " + repr(list(binds)) + ":\n"
            "    s = socket.socket(getattr(socket, fam)); s.bind((addr, 0)); s.listen(); globals().setdefault('k', []).append(s)\n"
            "    print(s.getsockname()[1], flush=True)\n"
            "time.sleep(0.3)\nprint('up', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    ports = [int(p.stdout.readline()) for _ in binds]
    assert p.stdout.readline().strip() == "up"
    return p, ports

"""DD301/DD302 `spaces`: proven against real torch. A space after the comma in GLOO_SOCKET_IFNAME makes
process-group creation fail exactly as DD302 predicts, and the value its fix prints works."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

INIT = """
import sys, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % int(sys.argv[1]), rank=0, world_size=1)
dist.destroy_process_group()
print("joined")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo(value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": value}
    return subprocess.run([sys.executable, "-c", INIT, str(_free_port())], env=env, capture_output=True, text=True, timeout=120)


def _network(value: str) -> dict:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": value, "NCCL_SOCKET_IFNAME": value,
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    out = subprocess.run([sys.executable, "-m", "ddpdoctor", "network", "--json"], env=env, capture_output=True,
                         text=True, timeout=120).stdout
    return {r["id"]: r for r in json.loads(out)["results"]}


def test_a_spaced_gloo_ifname_fails_as_dd302_predicts_and_its_fix_joins():
    results = _network("lo, lo")
    (finding,) = results["DD302"]["findings"]
    assert finding["id"] == "DD302.spaces"
    failed = _gloo("lo, lo")
    assert failed.returncode != 0 and "Unable to find address for:  lo" in failed.stderr  # the line DD302 quotes
    assert "Unable to find address for:  lo" in finding["message"]
    fixed = finding["fix"]["env"]["GLOO_SOCKET_IFNAME"]
    assert fixed == "lo,lo"
    assert _gloo(fixed).stdout.strip() == "joined"
    assert "DD302.spaces" not in json.dumps(_network(fixed))

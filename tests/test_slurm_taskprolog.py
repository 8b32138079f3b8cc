"""`ddpdoctor prolog --task` as Slurm's TaskProlog=: tasks get the interface variables, and a Gloo
job that failed without them passes with them (a real Slurm, srun and torchrun in the lab)."""
from __future__ import annotations

import sys

import pytest

from lab import ALLREDUCE_SCRIPT
from slurmlab import DD, start_or_skip

PORT = 29400


@pytest.fixture
def slurm_with_decoy(make_lab):
    """head + node1 + node2, where node2's hostname resolves to a decoy interface whose address is
    below node1's: Gloo's higher-addressed peer dials it and fails (measured: see DD303's docs and
    test_hostname_resolving_to_a_decoy_interface in test_lab_network.py)."""
    lab = make_lab(("head", "node1", "node2"))
    decoy = lab.decoy_cidr(side="low").split("/")[0]
    lab.add_decoy("node2", "decoy0", f"{decoy}/24")
    lab.set_hosts("node2", {**{n: lab.addr(n) for n in lab.names}, "node2": decoy})
    slurm = start_or_skip(lab)
    yield lab, slurm
    slurm.close()


def labelled(out: str) -> dict[str, list[str]]:
    """`srun -l` output -> {task: [lines]}."""
    res: dict[str, list[str]] = {}
    for line in out.splitlines():
        task, _, text = line.partition(": ")
        res.setdefault(task.strip(), []).append(text)
    return res


def gloo_job(slurm, tag: str):
    argv = ["srun", "-N", "2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=0",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=node1:{PORT}", f"--rdzv-id=slurm-{tag}", str(ALLREDUCE_SCRIPT)]
    return slurm.run(argv, env={"LAB_PG_TIMEOUT": "10"}, timeout=90)


def test_task_prolog_prints_only_export_lines_for_the_route_to_the_first_node(slurm_with_decoy):
    lab, _ = slurm_with_decoy
    env = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURMD_NODENAME": "node2"}
    r = lab.run("node2", [*DD, "prolog", "--task"], env=env, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["export GLOO_SOCKET_IFNAME=eth0", "export NCCL_SOCKET_IFNAME==eth0"]
    # on the first node the route to the second decides; a value the user set is never replaced
    r = lab.run("node1", [*DD, "prolog", "--task"], env={**env, "SLURMD_NODENAME": "node1", "NCCL_SOCKET_IFNAME": "ib"},
                timeout=20)
    assert r.stdout.splitlines() == ["export GLOO_SOCKET_IFNAME=eth0"]
    # the first node's name does not resolve here: a `print` line says so, nothing is exported
    lab.set_hosts("node2", {"node2": lab.addr("node2")})
    r = lab.run("node2", [*DD, "prolog", "--task"], env=env, timeout=20)
    (line,) = r.stdout.splitlines()
    assert r.returncode == 0 and line.startswith("print ddpdoctor: node1 does not resolve on node2")


def test_tasks_see_the_exported_interface_and_the_gloo_job_passes_with_it(slurm_with_decoy):
    lab, slurm = slurm_with_decoy
    res = gloo_job(slurm, "without")
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Network is unreachable" in res.stdout + res.stderr

    slurm.set_task_prolog([*DD, "prolog", "--task"])
    r = slurm.srun("-N", "2", "--ntasks-per-node=1", "-l", "printenv", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
    assert r.returncode == 0, r.stderr
    assert labelled(r.stdout) == {"0": ["eth0", "=eth0"], "1": ["eth0", "=eth0"]}
    # the user's own value wins
    r = slurm.srun("-N", "2", "--ntasks-per-node=1", "-l", "printenv", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                   env={"GLOO_SOCKET_IFNAME": "lo"})
    assert labelled(r.stdout) == {"0": ["lo", "=eth0"], "1": ["lo", "=eth0"]}

    res = gloo_job(slurm, "with")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("ALLREDUCE OK") == 2

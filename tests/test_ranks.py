"""Which process is a rank (probes/ranks.py), judged on /proc-like records of each launcher's real process tree.

The trees copy what each launcher really leaves (argv and environment): torchrun's agent runs as
`python /usr/bin/torchrun`, srun's tasks carry SLURM_PROCID (the agent too), mp.spawn's children run
`python -c "from multiprocessing.spawn import spawn_main; ..." --multiprocessing-fork`. The lab tests
(tests/test_ranks_lab.py, test_inspect_gather_lab.py) prove the same on real launches."""
from __future__ import annotations

from ddpdoctor.probes import proctable, ranks
from ddpdoctor.probes.proctable import Proc

PY = "/usr/bin/python3.11"
SPAWN = (PY, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
         "--multiprocessing-fork")


def P(pid, ppid, argv, env=None, *, start=None, torch=None, tcp=None, state="S", exe=PY):
    return Proc(pid, ppid, state, tuple(argv), env, 0, pid if start is None else start, exe, torch, tcp)


def tree(*procs):
    return {p.pid: p for p in (P(1, 0, ["/sbin/init"], {}, exe="/sbin/init"), *procs)}


def worker(rank, run="8f1c", restart=0, **extra):
    return {"RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": str(rank // 2), "TORCHELASTIC_RUN_ID": run, "TORCHELASTIC_RESTART_COUNT": str(restart),
            "MASTER_ADDR": "node1", "MASTER_PORT": "29500", **extra}


def one(disc):
    (job,) = disc.jobs
    return job


def test_torchrun_agent_is_the_launcher_and_its_workers_are_the_ranks():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/local/bin/torchrun", "--nproc-per-node=2", "t.py"], {}),
                            P(11, 10, [PY, "-u", "t.py"], worker(0)), P(12, 10, [PY, "-u", "t.py"], worker(1)),
                            P(13, 11, [PY, "-u", "t.py"], worker(0))))  # rank 0's DataLoader worker (fork)
    job = one(d)
    assert [(r.rank, r.pid, r.launcher, r.agent) for r in job.ranks] == [(0, 11, "torchrun", 10), (1, 12, "torchrun", 10)]
    assert job.ranks[0].members == (13,) and job.key == "torchelastic:8f1c"
    assert [(a.pid, a.kind, a.ranks) for a in job.agents] == [(10, "torchrun", (0, 1))]


def test_python_m_torch_distributed_run_is_an_agent_too():
    d = ranks.identify(tree(P(10, 1, [PY, "-m", "torch.distributed.run", "--standalone", "t.py"], {}),
                            P(11, 10, [PY, "t.py"], worker(0))))
    assert one(d).agents[0].kind == "torchrun" and [r.pid for r in one(d).ranks] == [11]


def test_srun_torchrun_reports_the_workers_not_the_agent_that_carries_slurm_procid():
    slurm = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2"}
    d = ranks.identify(tree(P(5, 1, ["slurmstepd: [77.0]"], {}, exe="/usr/sbin/slurmstepd"),
                            P(10, 5, [PY, "/usr/local/bin/torchrun", "--nnodes=2", "t.py"], slurm),
                            P(11, 10, [PY, "t.py"], {**slurm, **worker(2, run="none")}),
                            P(12, 10, [PY, "t.py"], {**slurm, **worker(3, run="none")})))
    job = one(d)
    assert [(r.rank, r.local_rank, r.pid) for r in job.ranks] == [(2, 0, 11), (3, 1, 12)]
    assert job.key == "slurm:77.0" and job.launcher == "torchrun" and job.agents[0].pid == 10


def test_srun_bash_script_that_starts_torchrun_is_a_launcher_not_a_rank():
    slurm = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}
    d = ranks.identify(tree(P(10, 1, ["/bin/bash", "run.sh"], slurm, exe="/usr/bin/bash"),
                            P(11, 10, [PY, "/usr/local/bin/torchrun", "t.py"], slurm),
                            P(12, 11, [PY, "t.py"], {**slurm, **worker(0)})))
    assert [r.pid for r in one(d).ranks] == [12]


def test_srun_python_is_a_rank_by_slurm_procid_but_not_a_task_without_torch_or_python():
    def task(rank):
        return {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2", "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank),
                "SLURM_NTASKS": "4"}
    d = ranks.identify(tree(P(5, 1, ["slurmstepd: [9.2]"], {}, exe="/usr/sbin/slurmstepd"),
                            P(10, 5, [PY, "train.py"], task(0), torch=True),
                            P(11, 5, [PY, "train.py"], task(1), torch=None),  # maps unreadable: kept
                            P(12, 5, ["/bin/sleep", "100"], task(2), exe="/bin/sleep"),
                            P(13, 5, [PY, "monitor.py"], task(3), torch=False)))
    job = one(d)
    assert [(r.rank, r.world_size, r.launcher, r.source, r.agent) for r in job.ranks] == [
        (0, 4, "srun", "SLURM_PROCID", 5), (1, 4, "srun", "SLURM_PROCID", 5)]
    assert job.agents[0].kind == "srun"


def test_a_rank_started_through_bash_c_is_the_python_below_the_shell():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "--no-python", "bash", "-c", "python t.py"], {}),
                            P(11, 10, ["bash", "-c", "python t.py; echo done"], worker(0), exe="/usr/bin/bash"),
                            P(12, 11, ["python", "t.py"], worker(0)),
                            P(13, 12, ["python", "t.py"], worker(0))))  # its DataLoader worker
    (r,) = one(d).ranks
    assert (r.pid, r.wrappers, r.members, r.agent) == (12, (11,), (13,), 10)


def test_mpirun_ranks_come_from_ompi_comm_world_rank():
    def env(rank):
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "OMPI_MCA_orte_hnp_uri": "2831155200.0;tcp://10.0.0.1:43211"}
    d = ranks.identify(tree(P(10, 1, ["mpirun", "-np", "2", "python", "t.py"], {}, exe="/usr/bin/orterun"),
                            P(11, 10, ["python", "t.py"], env(0), torch=True),
                            P(12, 10, ["python", "t.py"], env(1), torch=True)))
    job = one(d)
    assert [(r.rank, r.launcher, r.agent) for r in job.ranks] == [(0, "mpirun", 10), (1, "mpirun", 10)]
    assert job.key == "mpi:2831155200.0"


def test_mp_spawn_children_are_ranks_numbered_by_start_order_and_said_to_be_a_guess():
    d = ranks.identify(tree(P(10, 1, [PY, "train.py"], {}),
                            P(21, 10, SPAWN, {}, start=500, torch=True, tcp=True),
                            P(20, 10, SPAWN, {}, start=501, torch=True, tcp=True),  # pid wrapped: start decides
                            P(22, 10, SPAWN, {}, start=502, torch=True, tcp=False)))
    job = one(d)
    assert [(r.rank, r.pid, r.exact) for r in job.ranks] == [(0, 21, False), (1, 20, False), (2, 22, False)]
    assert job.world_size == 3 and job.agents[0].kind == "mp.spawn" and job.key == "spawn:10"
    assert any("not in the environment" in n for n in job.notes)


def test_a_multiprocessing_pool_that_joined_no_process_group_is_not_a_job():
    d = ranks.identify(tree(P(10, 1, [PY, "etl.py"], {}), P(20, 10, SPAWN, {}, torch=True, tcp=False),
                            P(21, 10, SPAWN, {}, torch=False, tcp=True)))
    assert d.jobs == ()


def test_an_elastic_restart_keeps_the_new_generation_and_names_the_exiting_one():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "--max-restarts=3", "t.py"], {}),
                            P(11, 10, [PY, "t.py"], worker(0, restart=0), state="Z"),
                            P(31, 10, [PY, "t.py"], worker(0, restart=1)), P(32, 10, [PY, "t.py"], worker(1, restart=1))))
    job = one(d)
    assert [(r.rank, r.pid, r.generation) for r in job.ranks] == [(0, 31, 1), (1, 32, 1)]
    assert [r.pid for r in job.previous] == [11] and job.agents[0].restarts == 1
    assert any("restarted 1 time" in n for n in job.notes)


def test_a_wrapper_that_only_names_a_launcher_is_not_one():
    assert ranks.agent_kind(("timeout", "60", "python", "-m", "torch.distributed.run", "t.py")) is None
    assert ranks.agent_kind(("/bin/bash", "-c", "torchrun t.py")) is None
    assert ranks.agent_kind((PY, "-u", "-m", "torch.distributed.run", "t.py")) == "torchrun"
    assert ranks.agent_kind((PY, "/opt/venv/bin/accelerate", "launch", "t.py")) == "accelerate"
    assert ranks.agent_kind(("orted", "-mca", "ess", "env")) == "mpirun"


def test_an_agent_between_two_generations_is_a_job_without_ranks_not_nothing():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "t.py"], {})))
    job = one(d)
    assert job.ranks == () and "no live worker" in job.notes[0]


def test_two_jobs_on_one_node_are_two_jobs_even_with_torchruns_default_run_id():
    a = {**worker(0, run="none"), "MASTER_PORT": "29500"}
    b = {**worker(0, run="none"), "MASTER_PORT": "29600"}
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "a.py"], {}), P(11, 10, [PY, "a.py"], a),
                            P(12, 10, [PY, "a.py"], {**a, "RANK": "1"}),
                            P(20, 1, [PY, "/usr/bin/torchrun", "b.py"], {}), P(21, 20, [PY, "b.py"], b)))
    assert [(j.key, len(j.ranks)) for j in d.jobs] == [("master:node1:29500", 2), ("master:node1:29600", 1)]


def test_accelerate_and_deepspeed_launchers_are_named():
    acc = ranks.identify(tree(P(10, 1, [PY, "/usr/local/bin/accelerate", "launch", "--multi_gpu", "t.py"], {}),
                              P(11, 10, [PY, "t.py"], {**worker(0), "ACCELERATE_MIXED_PRECISION": "bf16"})))
    assert one(acc).launcher == "accelerate" and one(acc).agents[0].kind == "accelerate"
    ds_env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "CROSS_RANK": "0", "CROSS_SIZE": "1",
              "LOCAL_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    ds = ranks.identify(tree(P(9, 1, [PY, "/usr/local/bin/deepspeed", "t.py"], {}),
                             P(10, 9, [PY, "-u", "-m", "deepspeed.launcher.launch", "--world_info=eyJs"], {}),
                             P(11, 10, [PY, "-u", "t.py", "--local_rank=1"], ds_env)))
    assert [(r.rank, r.launcher, r.agent) for r in one(ds).ranks] == [(1, "deepspeed", 10)]


def test_ddpdoctor_beside_the_job_under_srun_is_not_a_rank():
    slurm = {"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "3", "SLURM_PROCID": "0"}
    d = ranks.identify(tree(P(10, 1, [PY, "-m", "ddpdoctor", "inspect", "--gather"], slurm, torch=False),
                            P(11, 1, [PY, "/usr/local/bin/ddpdoctor", "watch"], slurm, torch=False)))
    assert d.jobs == ()


def test_unreadable_environments_are_counted_not_guessed():
    d = ranks.identify(tree(P(10, 1, [PY, "t.py"], None), P(11, 1, [PY, "t.py"], None)))
    assert (d.jobs, d.unreadable) == ((), 2)


def test_an_nvml_pid_of_a_dataloader_worker_belongs_to_its_rank():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "t.py"], {}), P(11, 10, [PY, "t.py"], worker(0)),
                            P(12, 11, [PY, "t.py"], worker(0))))
    assert ranks.owner(d, 12).pid == 11 and ranks.owner(d, 10) is None


def test_the_launcher_tree_is_in_the_json():
    d = ranks.identify(tree(P(10, 1, [PY, "/usr/bin/torchrun", "t.py"], {}), P(11, 10, [PY, "t.py"], worker(0))))
    j = d.to_dict()["jobs"][0]
    assert j["agents"] == [{"pid": 10, "kind": "torchrun", "cmdline": f"{PY} /usr/bin/torchrun t.py", "ranks": [0],
                            "restarts": 0}]
    assert {k: j["ranks"][0][k] for k in ("rank", "pid", "generation", "agent")} == {
        "rank": 0, "pid": 11, "generation": 0, "agent": 10}


def test_proctable_reads_a_copy_of_a_proc_tree(tmp_path):
    p = tmp_path / "42"
    p.mkdir()
    # comm holding spaces and a parenthesis, as a process may name itself
    (p / "stat").write_text("42 (py (x) y) S 7 42 42 0 -1 4194560 1 0 0 0 150 25 0 0 20 0 3 0 98765 1 1\n")
    (p / "cmdline").write_bytes(b"python3\0t.py\0")
    (p / "environ").write_bytes(b"RANK=3\0SECRET=x\0WORLD_SIZE=4\0")
    (p / "maps").write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/python3/site-packages/torch/lib/libc10.so\n")
    snap = proctable.snapshot(str(tmp_path))
    q = snap[42]
    assert (q.state, q.ppid, q.cpu_ticks, q.start, q.argv) == ("S", 7, 175, 98765, ("python3", "t.py"))
    assert q.env == {"RANK": "3", "WORLD_SIZE": "4"}  # only the variables kept
    assert proctable.has_torch(42, str(tmp_path)) is True

"""Many posted logs end generic (issue 23, "absent" logs; ddpdoctor/logscan/endings.py): only torchrun's summary, its
SIGTERM teardown, NCCL's bare `unhandled cuda error`, a SIGBUS, a store-based barrier timeout cut before its counts.
The ending stays what the log shows (its own mode with low confidence, or nothing named: "unknown"); the causes behind
it follow as weaker alternatives, each with the line that raised it and the command that decides, never a confident
guess. The lines are in the wording of the code that prints them (torch elastic's summary template, NCCL's
ncclGetErrorString and CUDACHECK WARN, Open MPI's signal handler) behind the prefixes launchers put in front."""

from ddpdoctor import catalog
from ddpdoctor.logscan import endings
from ddpdoctor.logscan.render import LOW, SHOW_FULL, render_text
from logtext import explain, ids, by_id

# torch/distributed/elastic/multiprocessing/errors/__init__.py _MSG_FORMAT_TEMPLATE / _FAILURE_FORMAT_TEMPLATE as torch
# 2.x prints them for a worker that exited 1 without an error file
SUMMARY = """Traceback (most recent call last):
  File "/opt/conda/bin/torchrun", line 33, in <module>
    sys.exit(load_entry_point('torch', 'console_scripts', 'torchrun')())
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 812, in main
    run(args)
  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/launcher/api.py", line 264, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-05_10:12:44
  host      : gpu-node-3
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 48213)
  error_file: <N/A>
  traceback : {message}
============================================================""".splitlines()
NO_FILE = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
AGENT = ("E0305 10:12:44.120000 140211 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: {code}) "
         "local_rank: 1 (pid: 48213) of binary: /opt/conda/bin/python")
SIGTERM = "W0305 10:12:43.990000 140211 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 48212 " \
          "closing signal SIGTERM"


def summary(code, message=NO_FILE):
    return [ln.format(code=code, message=message) for ln in SUMMARY]


def assert_weak_candidates(ex, expected):
    """Nothing named with confidence; the expected candidates first, in order, each saying what decides."""
    assert all(d.confidence < SHOW_FULL for d in ex.diagnoses), [(d.failure.id, d.confidence) for d in ex.diagnoses]
    assert ids(ex)[:len(expected)] == expected, ids(ex)
    for fid in expected:
        d = by_id(ex, fid)
        assert any("decide with:" in n for n in d.notes), (fid, d.notes)
        assert d.evidence, fid


def test_every_mode_and_signature_the_endings_name_exists():
    fms = catalog.failures()
    for fid, name in endings.SIGNATURES_USED:
        assert name in {s.name for s in fms[fid].signatures}, (fid, name)
    for _, cands in endings._CUDA_ERRORS:
        assert all(c[0] in fms for c in cands)
    assert all(c[0] in fms for c in endings._BARE)


def test_exit_code_1_without_the_workers_traceback_lists_the_exceptions_behind_it():
    ex = explain([SIGTERM, AGENT.format(code=1)] + summary(1))
    assert_weak_candidates(ex, ["USER_CODE_EXCEPTION", "GPU_OUT_OF_MEMORY"])
    note = by_id(ex, "USER_CODE_EXCEPTION").notes[0]
    assert "exited with code 1" in note and "error_file: <N/A>" in note and "@record" in note
    text = render_text(ex)
    assert "No line in this log points clearly at a cause" in text and "candidate: USER_CODE_EXCEPTION" in text


def test_a_childfailederror_cut_before_its_summary_reads_the_same():
    ex = explain(SUMMARY[:13])
    assert_weak_candidates(ex, ["USER_CODE_EXCEPTION", "GPU_OUT_OF_MEMORY"])
    assert "ChildFailedError" in by_id(ex, "USER_CODE_EXCEPTION").notes[0]


def test_the_workers_own_traceback_in_the_log_is_the_answer_not_this_list():
    own = ["[rank1]: Traceback (most recent call last):",
           '[rank1]:   File "/home/me/train.py", line 88, in train_step',
           "[rank1]:     loss = criterion(out, batch['label'])",
           "[rank1]: KeyError: 'label'"]
    ex = explain(own + [SIGTERM, AGENT.format(code=1)] + summary(1))
    assert ids(ex)[0] == "USER_CODE_EXCEPTION" and ex.diagnoses[0].confidence >= SHOW_FULL
    assert "GPU_OUT_OF_MEMORY" not in ids(ex)


def test_other_exit_codes_keep_their_own_modes():
    ex = explain([AGENT.format(code=-9)] + summary(-9, "Signal 9 (SIGKILL) received by PID 48213"))
    assert ids(ex)[0] == "HOST_OOM_SIGKILL" and ex.diagnoses[0].confidence >= LOW
    assert "GPU_OUT_OF_MEMORY" not in ids(ex)


def test_a_teardown_alone_points_at_a_worker_that_died_without_a_word():
    ex = explain(["epoch 3: 41%|####      | 410/1000", SIGTERM, SIGTERM.replace("48212", "48214")])
    assert_weak_candidates(ex, ["HOST_OOM_SIGKILL", "USER_CODE_EXCEPTION"])
    assert "dmesg" in by_id(ex, "HOST_OOM_SIGKILL").notes[0]


UNHANDLED = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5")


def test_a_bare_unhandled_cuda_error_lists_the_cuda_failures_behind_it():
    ex = explain([UNHANDLED])
    assert_weak_candidates(ex, ["FABRIC_MANAGER_NOT_RUNNING", "CUDA_DRIVER_TOO_OLD", "GPU_HARDWARE_FAULT"])
    assert "NCCL_DEBUG=INFO" in by_id(ex, "GPU_HARDWARE_FAULT").notes[0]


def test_ncc_ls_cuda_failure_warn_picks_the_candidates_by_its_cuda_error():
    # src/include/checks.h CUDACHECK: WARN("Cuda failure '%s'", cudaGetErrorString(err)) behind NCCL's WARN prefix
    warn = "node1:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure '{}'"
    ex = explain([warn.format("invalid argument"), UNHANDLED])
    assert_weak_candidates(ex, ["NCCL_RELEASE_BUG", "CUDA_DRIVER_TOO_OLD"])
    assert "FABRIC_MANAGER_NOT_RUNNING" not in ids(ex)
    ex = explain([warn.format("peer mapping resources exhausted"), UNHANDLED])
    assert_weak_candidates(ex, ["CONSUMER_GPU_P2P_BROKEN", "NCCL_P2P_ACS_IOMMU_HANG"])
    # cudawrap.h CUCHECK (2.18+): the error number before the string
    ex = explain(["node1:77:90 [3] misc/cudawrap.cc:188 NCCL WARN Cuda failure 999 'unknown error'", UNHANDLED])
    assert_weak_candidates(ex, ["GPU_HARDWARE_FAULT"])
    # cudaErrorCallRequiresNewerDriver's words name the cause themselves
    ex = explain([warn.format("API call is not supported in the installed CUDA driver"), UNHANDLED])
    assert ids(ex)[0] == "CUDA_DRIVER_TOO_OLD" and ex.diagnoses[0].confidence >= LOW
    # a CUDA error none of the modes explains: nothing guessed
    assert ids(explain([warn.format("initialization error"), UNHANDLED])) == []


def test_a_windows_host_moves_wsl_first():
    ex = explain(["DESKTOP-VMBL43V:1354:1354 [0] NCCL INFO Bootstrap : Using eth0:172.23.125.43<0>", UNHANDLED])
    assert ids(ex)[0] == "WSL_NCCL_UNSUPPORTED" and ex.diagnoses[0].confidence < LOW
    assert set(ids(ex)[1:4]) == {"FABRIC_MANAGER_NOT_RUNNING", "CUDA_DRIVER_TOO_OLD", "GPU_HARDWARE_FAULT"}, ids(ex)
    assert all(d.confidence < SHOW_FULL for d in ex.diagnoses[1:])


def test_a_decided_cause_leaves_the_unhandled_cuda_error_alone():
    ex = explain(["node1:77:90 [0] NCCL WARN Cuda failure 802 'system not yet initialized'", UNHANDLED])
    assert ids(ex)[0] == "FABRIC_MANAGER_NOT_RUNNING" and ex.diagnoses[0].confidence >= LOW
    assert "GPU_HARDWARE_FAULT" not in ids(ex)


BUS = "[1,3]<stderr>:[b44a5a6092b3:00121] Signal: Bus error (7)"


def test_open_mpi_s_sigbus_names_both_users_of_dev_shm():
    ex = explain(["[1,3]<stderr>:[b44a5a6092b3:00121] *** Process received signal ***", BUS,
                  "[1,3]<stderr>:[b44a5a6092b3:00121] Signal code: Non-existant physical address (2)"])
    assert ids(ex)[:2] == ["DATALOADER_SHM_BUS_ERROR", "NCCL_SHM_TOO_SMALL"], ids(ex)
    assert ex.diagnoses[0].confidence < LOW
    assert "NCCL_SHM_DISABLE=1" in by_id(ex, "NCCL_SHM_TOO_SMALL").notes[0]


def test_torchrun_s_sigbus_keeps_its_reading_with_nccl_s_beside_it():
    ex = explain([AGENT.format(code=-7)])
    assert ids(ex)[:2] == ["DATALOADER_SHM_BUS_ERROR", "NCCL_SHM_TOO_SMALL"], ids(ex)
    assert ex.diagnoses[1].confidence < SHOW_FULL


def test_the_dataloader_s_own_message_leaves_no_nccl_alternative():
    ex = explain(["RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that "
                  "dataloader's workers are out of shared memory.", AGENT.format(code=-7)])
    assert ids(ex)[0] == "DATALOADER_SHM_BUS_ERROR" and "NCCL_SHM_TOO_SMALL" not in ids(ex)


def test_open_mpi_s_abort_is_a_native_crash_with_its_candidates():
    ex = explain(["free(): corrupted unsorted chunks", "[rack1-93-slot7:186363] *** Process received signal ***",
                  "[rack1-93-slot7:186363] Signal: Aborted (6)", "[rack1-93-slot7:186363] Signal code:  (-6)"])
    assert ids(ex)[:2] == ["WORKER_NATIVE_CRASH", "NCCL_COLLECTIVE_TIMEOUT"], ids(ex)
    assert all(d.confidence < SHOW_FULL for d in ex.diagnoses)


def test_a_store_barrier_timeout_cut_before_its_counts_stays_undecided():
    ex = explain(["timed out initializing process group in store based barrier on rank"])
    assert ids(ex)[0] == "STORE_BARRIER_WORKER_COUNT_MISMATCH" and ex.diagnoses[0].confidence < SHOW_FULL
    assert set(ids(ex)[1:3]) == {"SLURM_NTASKS_MISMATCH", "MASTER_PORT_IN_USE"}
    assert "world_size" in ex.diagnoses[0].notes[0]
    # with its counts the line decides: no list
    full = explain(["RuntimeError: Timed out initializing process group in store based barrier on rank: 2, for key: "
                    "store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)"])
    assert ids(full)[0] == "STORE_BARRIER_WORKER_COUNT_MISMATCH" and full.diagnoses[0].confidence >= LOW
    assert "MASTER_PORT_IN_USE" not in ids(full)[:1]


def test_a_clean_log_stays_clean():
    ex = explain(["node1:301:301 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
                  "node1:301:301 [0] NCCL INFO comm 0x5e0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
                  "epoch 1: loss 0.31", "Training finished."])
    assert ids(ex) == []


SETUP = ["i-56butc:9822:9822 [0] NCCL INFO Bootstrap : Using bond0:10.0.11.5<0>",
         "i-56butc:9822:9822 [0] NCCL INFO cudaDriverVersion 12080",
         "i-56butc:9822:9822 [0] NCCL INFO NCCL version 2.26.5+cuda12.9"]


def test_a_log_that_stops_in_ncc_ls_set_up_lists_its_clues_as_candidates():
    gpus = ["#  Rank  0 Group  0 Pid   9822 on i-56butc device  0 [0000:2c:00] NVIDIA GeForce RTX 4090",
            "#  Rank  1 Group  0 Pid   9822 on i-56butc device  1 [0000:2d:00] NVIDIA GeForce RTX 4090"]
    ex = explain(gpus + SETUP)
    assert_weak_candidates(ex, ["CONSUMER_GPU_P2P_BROKEN"])
    assert "stops at NCCL's set-up output" in by_id(ex, "CONSUMER_GPU_P2P_BROKEN").notes[0]
    # the same lines followed by the job's progress: a healthy start, no diagnosis
    assert ids(explain(gpus + SETUP + ["step 10 loss 2.31", "step 20 loss 2.02"])) == []
    # ... and a clue line after NCCL's output is not NCCL's: the log went on past the set-up
    frame = '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier'
    assert ids(explain(gpus + SETUP + [frame, "step 10 loss 2.31"])) == []


def test_a_log_that_stops_in_ncc_ls_set_up_without_clues_points_at_the_first_transfers():
    ex = explain(SETUP)
    assert_weak_candidates(ex, ["NCCL_P2P_ACS_IOMMU_HANG", "CONSUMER_GPU_P2P_BROKEN"])
    two = [ln.replace("i-56butc:", "node2:") for ln in SETUP]
    ex = explain(SETUP + two)
    assert_weak_candidates(ex, ["FIREWALL_BLOCKS_PORTS", "NCCL_WRONG_INTERFACE_AUTOSELECTED"])


INVALID = "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/../c10d/NCCLUtils.hpp:82, invalid argument, NCCL version 2.4.8"


def test_a_bare_nccl_invalid_argument_points_at_a_rank_outside_the_world():
    ex = explain([INVALID])
    assert_weak_candidates(ex, ["RANK_OUT_OF_WORLD_SIZE", "NCCL_LIBRARY_CONFLICT"])
    # srun's report of its tasks (slurm src/srun/launch.c) adds the Slurm task layout
    ex = explain([INVALID, "srun: error: node-0: tasks 2-7: Exited with exit code 1"])
    assert set(ids(ex)[:2]) == {"RANK_OUT_OF_WORLD_SIZE", "SLURM_NTASKS_MISMATCH"}, ids(ex)
    assert "USER_CODE_EXCEPTION" not in ids(ex)   # the worker's error is in the log: not an exit without traceback
    # NCCL's own WARN names the rank: its signature decides
    ex = explain(["node1:77:77 [0] init.cc:981 NCCL WARN Invalid rank requested : 5/4", INVALID])
    assert ids(ex)[0] == "RANK_OUT_OF_WORLD_SIZE" and ex.diagnoses[0].confidence >= LOW


def test_mp_spawn_s_wrapper_cut_before_the_child_s_exception_reads_like_torchrun_s():
    ex = explain(["Traceback (most recent call last):",
                  '  File "/usr/local/lib/python3.8/dist-packages/torch/multiprocessing/spawn.py", line 150, in join',
                  "    raise ProcessRaisedException(msg, error_index, failed_process.pid)",
                  "torch.multiprocessing.spawn.ProcessRaisedException:", "",
                  "-- Process 1 terminated with the following error:",
                  "Traceback (most recent call last):",
                  '  File "/usr/local/lib/python3.8/dist-packages/torch/multiprocessing/spawn.py", line 59, in _wrap',
                  "    fn(i, *args)"])
    assert_weak_candidates(ex, ["USER_CODE_EXCEPTION", "GPU_OUT_OF_MEMORY"])
    assert "mp.spawn" in by_id(ex, "USER_CODE_EXCEPTION").notes[0]

"""A confident wrong answer costs more than none (issue 23): `explain` gives a diagnosis high confidence only when
the log holds decisive evidence for it, a line that names that cause and that no other failure prints as well
(or a cross-line rule); lines every hang or every unreachable store prints (a watchdog timeout, a store connect
timeout, `No route to host`) name the mode with low confidence and say what would decide. Modes that say what
happened but never why (a worker killed by SIGSEGV, a hung watchdog thread) stay weak pointers, below any
specific cause in the same log. Lines are the wording of torch's own templates and of real pastes."""

from ddpdoctor.logscan.render import LOW, SHOW_FULL
from logtext import explain

WATCHDOG = ("[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) "
            "ran for 600081 milliseconds before timing out.")
WATCHDOG_1_8 = ("[E ProcessGroupNCCL.cpp:566] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(OpType={op}, "
                "TensorShape=[1024], Timeout(ms)=1800000) ran for 1804715 milliseconds before timing out.")
SIGABRT = "E1119 08:26:02.715000 28705 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: -6) " \
          "local_rank: 1 (pid: 28773) of binary: /usr/bin/python3"
SIGSEGV_SUMMARY = ["  rank      : 0 (local_rank: 0)", "  exitcode  : -11 (pid: 6421)", "  error_file: <N/A>",
                   "  traceback : Signal 11 (SIGSEGV) received by PID 6421"]
STUCK = ("[rank2]:[E704 13:48:58.260494728 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
         "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
         "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, "
         "and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or "
         "other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer timeout would "
         "help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the "
         "heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).")


def top(ex):
    d = ex.diagnoses[0]
    return d.failure.id, d.confidence


def test_a_watchdog_timeout_alone_names_the_timeout_with_low_confidence_and_what_would_decide():
    ex = explain([WATCHDOG])
    fid, conf = top(ex)
    assert fid == "NCCL_COLLECTIVE_TIMEOUT" and SHOW_FULL <= conf < LOW
    assert any("what would decide" in n for n in ex.diagnoses[0].notes)


def test_a_store_connect_timeout_on_a_high_port_is_not_a_confident_firewall():
    ex = explain(["[E1121 05:30:10.776171414 socket.cpp:1028] [c10d] The client socket has timed out after 10000ms "
                  "while trying to connect to (node1, 45705)."])
    assert all(d.confidence < LOW for d in ex.diagnoses)


def test_no_route_to_host_does_not_decide_between_an_unroutable_address_and_a_firewall_reject():
    ex = explain(["RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:152] "
                  "timed out connecting: SO_ERROR: No route to host, remote=[198.18.0.2]:41234"])
    assert all(d.confidence < LOW for d in ex.diagnoses)
    # "Network is unreachable" has one cause only: no route to the address the peer advertised
    ex = explain(["RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/socket.cc:142] rv != -1. "
                  "-1 vs -1. connect: Network is unreachable"])
    assert top(ex)[0] == "GLOO_ADDRESS_UNREACHABLE" and top(ex)[1] >= LOW


def test_a_line_that_names_its_cause_keeps_high_confidence():
    ex = explain(["[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                  "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.18.1",
                  "node1:1234:1300 [1] NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"])
    assert top(ex)[0] == "DUPLICATE_GPU_PER_RANK" and top(ex)[1] >= LOW


def test_a_narrower_pattern_on_a_line_a_broader_one_also_matches_still_decides():
    # the Kubernetes service name's lookup failure is also a plain lookup failure (HOSTNAME_UNRESOLVABLE's broader
    # pattern): the narrower mode stays decisive
    ex = explain(["[W socket.cpp:663] [c10d] The IPv6 network addresses of (trainer-0.trainer.default.svc.cluster.local, "
                  "29500) cannot be retrieved (gai error: -2 - Name or service not known)."])
    assert top(ex)[0] == "K8S_DNS_NOT_READY" and top(ex)[1] >= LOW


def test_an_shm_segment_error_decides_only_with_its_errno():
    bare = "node1:214:392 [2] misc/shmutils.cc:114 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)"
    assert top(explain([bare])) [0] == "NCCL_SHM_TOO_SMALL" and top(explain([bare]))[1] < LOW
    nospace = bare.replace("(size 9637888)", "(size 9637888), error: No space left on device (28)")
    assert top(explain([nospace])) == ("NCCL_SHM_TOO_SMALL", top(explain([nospace]))[1]) and top(explain([nospace]))[1] >= LOW


def test_two_unrelated_modes_the_log_does_not_decide_between_are_both_low_confidence():
    ex = explain(["[rank0]: RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
                  "you must use the 'spawn' start method",
                  "[rank1]: RuntimeError: Distributed package doesn't have NCCL built in"])
    first, second = ex.diagnoses[:2]
    assert abs(first.score - second.score) <= 0.05
    assert first.confidence < LOW and second.confidence < LOW
    assert any("does not decide" in n for n in first.notes)


def test_a_worker_killed_by_sigsegv_with_nothing_else_is_named_low_confidence_with_what_would_decide():
    # what the log shows, not why: named only at the naming level, because the dev threads whose log rested on this
    # line alone found nothing behind it (calibration.TALLY), and marked low confidence, with the commands that decide
    ex = explain(["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 0 (pid: 6421) "
                  "of binary: /usr/bin/python3"] + SIGSEGV_SUMMARY)
    fid, conf = top(ex)
    assert fid == "WORKER_NATIVE_CRASH" and SHOW_FULL <= conf < LOW
    assert any("PYTHONFAULTHANDLER" in n for n in ex.diagnoses[0].notes)


def test_sigabrt_after_a_watchdog_timeout_is_the_timeout_s_story():
    ids = [d.failure.id for d in explain([WATCHDOG, SIGABRT]).diagnoses]
    assert ids[0] == "NCCL_COLLECTIVE_TIMEOUT" and ids.index("WORKER_NATIVE_CRASH") > 0


def test_a_specific_cause_outranks_the_signal_that_killed_the_worker():
    ex = explain(["[rank1]: RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                  "multiprocessing, you must use the 'spawn' start method", SIGABRT])
    ids = [d.failure.id for d in ex.diagnoses]
    assert ids[0] == "CUDA_REINIT_IN_FORKED_SUBPROCESS" and top(ex)[1] >= LOW
    assert "WORKER_NATIVE_CRASH" not in ids[:1]


def test_mp_spawn_signal_deaths_old_and_new_wording():
    for line in ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV",
                 "Exception: Process 1 terminated with signal SIGABRT."):
        assert top(explain([line]))[0] == "WORKER_NATIVE_CRASH", line


def test_a_hung_watchdog_alone_is_a_weak_pointer_and_after_a_collective_timeout_its_consequence():
    ex = explain([STUCK])
    assert top(ex)[0] == "NCCL_WATCHDOG_HUNG" and SHOW_FULL <= top(ex)[1] < LOW   # named by the dev count, low
    ids = [d.failure.id for d in explain([STUCK, WATCHDOG]).diagnoses]
    assert ids[0] == "NCCL_COLLECTIVE_TIMEOUT" and "NCCL_WATCHDOG_HUNG" in ids


def test_torch_1_8_watchdog_lines_without_seqnum_are_read_and_compared_across_ranks():
    ex = explain([WATCHDOG_1_8.format(r=0, op="ALLREDUCE"), WATCHDOG_1_8.format(r=1, op="BROADCAST")])
    ids = [d.failure.id for d in ex.diagnoses]
    assert "NCCL_COLLECTIVE_TIMEOUT" in ids
    # no SeqNum to compare: the ops still differ, which is what the mismatch rule needs
    assert ids[0] == "COLLECTIVE_MISMATCH_ACROSS_RANKS", ids


def test_the_torch_2_1_oom_message_with_its_misspelling_is_read_for_its_figures():
    ex = explain(["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 570.00 MiB. GPU 0 has a total "
                  "capacty of 79.25 GiB of which 103.50 MiB is free. Including non-PyTorch memory, this process has 79.14 "
                  "GiB memory in use. Of the allocated memory 76.38 GiB is allocated by PyTorch, and 2.24 GiB is reserved "
                  "by PyTorch but unallocated."])
    d = ex.diagnoses[0]
    assert d.failure.id == "GPU_OUT_OF_MEMORY"
    assert any("this process itself holds 79.1 of 79.2 GiB" in n for n in d.notes), d.notes


def test_an_oom_message_printed_without_its_exception_class_is_still_an_oom():
    ex = explain(["- error: `CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.14 GiB of "
                  "which 2.09 GiB is free.`"])
    assert top(ex)[0] == "GPU_OUT_OF_MEMORY"


def test_a_traceback_cut_where_set_device_raises_names_the_likely_ordinal_error_with_low_confidence():
    tb = ["[rank6]: Traceback (most recent call last):",
          '[rank6]:   File "/workspace/train.py", line 12, in <module>',
          "[rank6]:     torch.cuda.set_device(local_rank)",
          '[rank6]:   File "/workspace/pypacks/torch/cuda/__init__.py", line 399, in set_device']
    ex = explain(tb)
    d = ex.diagnoses[0]
    assert d.failure.id == "NPROC_EXCEEDS_GPUS" and SHOW_FULL <= d.confidence < LOW
    assert any("cut right where torch.cuda.set_device raises" in n and "nvidia-smi -L" in n for n in d.notes)
    # with its error line the traceback is not cut: the line itself decides (and no "cut" note)
    ex = explain(tb + ["[rank6]: RuntimeError: CUDA error: invalid device ordinal"])
    assert not any("is cut" in n for d in ex.diagnoses for n in d.notes)


def test_an_exception_line_with_the_next_records_glued_on_is_read_up_to_its_own_end():
    # a paste that lost its newlines: the elastic agent's SIGTERM records follow the rank's exception on one line
    ex = explain(["[rank2]: Traceback (most recent call last):",
                  "[rank2]: RuntimeError: shape mismatch: value tensor of shape [3, 14325] cannot be broadcast to indexing "
                  "result of shape [3, 9215] W0227 23:25:08.126000 227320 site-packages/torch/distributed/elastic/"
                  "multiprocessing/api.py:897] Sending process 227444 closing signal SIGTERM"])
    d = ex.diagnoses[0]
    assert d.failure.id == "USER_CODE_EXCEPTION"
    assert any("shape mismatch" in n and "SIGTERM" not in n.split("shape mismatch")[1][:120] for n in d.notes)


def test_an_nccl_system_error_under_wsl_points_at_wsl_first_with_low_confidence():
    ex = explain(["RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
                  "NCCL version 2.7.8", "PS: I am running it on WSL2"])
    d = ex.diagnoses[0]
    assert d.failure.id == "WSL_NCCL_UNSUPPORTED" and d.confidence < LOW


def test_an_oom_line_that_does_not_say_whose_memory_filled_the_gpu_is_low_confidence():
    d = explain(["RuntimeError: CUDA error: out of memory"]).diagnoses[0]
    assert d.failure.id == "GPU_OUT_OF_MEMORY" and SHOW_FULL <= d.confidence < LOW
    assert any("nvidia-smi" in n for n in d.notes)


def test_an_allocation_larger_than_the_whole_gpu_decides_the_oom():
    d = explain(["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 154.84 GiB. GPU 0 has a total "
                 "capacity of 23.69 GiB of which 13.97 GiB is free."]).diagnoses[0]
    assert d.failure.id == "GPU_OUT_OF_MEMORY" and d.confidence >= LOW
    assert any("cannot fit" in n for n in d.notes)


def test_a_launcher_ssh_that_cannot_reach_a_node_is_the_launcher_not_a_firewall_guess():
    ex = explain(["ssh: connect to host 175.24.121.148 port 22: No route to host",
                  "subprocess.CalledProcessError: Command '['ssh 175.24.121.148 hostname -I']' returned non-zero exit "
                  "status 255."])
    assert top(ex)[0] == "LAUNCHER_SSH_UNREACHABLE" and top(ex)[1] >= LOW


def test_ib_transport_retry_exceeded_does_not_decide_between_gid_and_fabric():
    ex = explain(["PHLRR4036:24141:24296 [2] ib_plugin.c:978 NCCL WARN NET/IB : Got completion from peer "
                  "10.226.98.98<48598> with error 12, opcode 0, len 0, vendor err 129"])
    assert all(d.confidence < LOW for d in ex.diagnoses)

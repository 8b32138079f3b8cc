"""Wordings missed on corpus batch 14 (issue 23 §1-2), each from the code that prints it: CPython argparse's
"unrecognized arguments" (Lib/argparse.py, 2.7 .. 3.13) as forum software renders it (the `--` of the launcher's
argument turned into a typographic dash, `error:` retyped `Error:`), torchrun's report of a worker killed by a native
signal (torch/distributed/elastic/multiprocessing/api.py) with whatever a poster typed before it, and the heartbeat
monitor's "watchdog got stuck" line of every release (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp). Each test
also pins what the line must not be taken for."""
from ddpdoctor.logscan.render import LOW, SHOW_FULL
from test_explain_calibration import explain, top

EN, EM, MINUS = "\u2013", "\u2014", "\u2212"


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def test_argparse_rejecting_the_local_rank_reads_through_a_forum_s_typographic_dash_and_capital():
    for line in (f"extract.py: error: unrecognized arguments: {EN}local_rank=19",
                 f"Error: unrecognized arguments: {EN}local_rank=19",
                 f"`Error: unrecognized arguments: {EN}local_rank=19`",
                 f"main.py: error: unrecognized arguments: {EM}local-rank=0",
                 f"main.py: error: unrecognized arguments: {MINUS}{MINUS}local-rank=1",
                 "main.py: error: unrecognized arguments: --local-rank=0"):
        fid, c = top(explain([line]))
        assert fid == "LOCAL_RANK_ARG_MISMATCH" and c >= LOW, line
    # another argument the script does not take is not the launcher's, dash or no dash
    for line in (f"main.py: error: unrecognized arguments: {EN}foo=1", "main.py: error: unrecognized arguments: --lr 3",
                 f"unrecognized arguments: {EN}local_rank=1 are fine here, said nobody"):
        assert "LOCAL_RANK_ARG_MISMATCH" not in ids(explain([line]))[:1] or top(explain([line]))[1] < LOW, line


TORCHRUN = "failed (exitcode: {}) local_rank: 1 (pid: 367727) of binary: /opt/env/bin/python3.11"


STUCK = ("[rank1]:[E922 19:07:21.891247234 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
         "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
         "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, "
         "and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), "
         "or other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer timeout "
         "would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or "
         "disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel free "
         "to file an issue to PyTorch about the short timeout or false positive abort; otherwise, please attempt to "
         "debug the hang. ")


def test_the_watchdog_got_stuck_line_alone_is_named_as_what_happened_at_low_confidence():
    # the dev threads whose log rested on this line alone found nothing behind the hang (3 against 0, with the
    # consequence-mode labelling rule): named at the naming level only, low confidence, with what would decide
    ex = explain([STUCK])
    fid, c = top(ex)
    assert fid == "NCCL_WATCHDOG_HUNG" and SHOW_FULL <= c < LOW
    # after a collective timeout the hang is the timeout's tail
    watchdog = ("[rank1]:[E922 19:00:21.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                "ran for 600013 milliseconds before timing out.")
    assert top(explain([watchdog, STUCK]))[0] == "NCCL_COLLECTIVE_TIMEOUT"


FRAMES = ["frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f5e2fb6c446 in /opt/torch/lib/libc10.so)",
          "frame #1: <unknown function> + 0xe4271b (0x7f5de56a071b in /opt/torch/lib/libtorch_cuda.so)"]


def test_the_head_of_the_watchdog_thread_s_backtrace_points_at_a_timeout_or_a_cuda_error_unnamed():
    for head in ("Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1601 "
                 "(most recent call first):",
                 "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2043 "
                 "(most recent call first):"):
        ex = explain([head] + FRAMES + ["[2024-09-04 15:37:08,067] torch.distributed.elastic.multiprocessing.api: "
                                        "[WARNING] Sending process 1153515 closing signal SIGTERM"])
        fid, c = top(ex)
        assert fid == "NCCL_COLLECTIVE_TIMEOUT" and c < SHOW_FULL, head   # what it raised is cut off
        assert "CUDA_KERNEL_ERROR" in ids(ex)[:3], head
    # the backtrace of another function, or of another file's `run`, is not the watchdog's
    for head in ("Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most "
                 "recent call first):", "Exception raised from run at ../torch/csrc/jit/runtime/interpreter.cpp:12 "
                 "(most recent call first):"):
        assert "NCCL_COLLECTIVE_TIMEOUT" not in ids(explain([head] + FRAMES)), head
    # with the line that says what it raised, that line decides
    cuda = ("[rank0]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 0] Process group "
            "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered")
    assert top(explain([cuda, "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/"
                              "ProcessGroupNCCL.cpp:1601 (most recent call first):"] + FRAMES))[0] == "CUDA_KERNEL_ERROR"


NCCL23_REFUSED = "node2:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused"


def test_nccl_2_3_s_exhausted_connect_retries_read_as_a_peer_on_another_address():
    # NCCL 2.3 (src/include/core.h SYSCHECKNTIMES): 20 s of refused connects, then this WARN; the 2.4+ INFO retries
    # read the same
    fid, c = top(explain([NCCL23_REFUSED]))
    assert fid == "NCCL_WRONG_INTERFACE_AUTOSELECTED" and SHOW_FULL <= c < LOW
    # with NCCL 2.3's list of interfaces naming lo, the interface is the likelier story still, never decided
    ex = explain(["node2:4152:4206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>",
                  "node2:4152:4206 [0] NCCL INFO NET : Using interface eth0:10.151.40.240<0>", NCCL23_REFUSED])
    fid, c = top(ex)
    assert fid == "NCCL_WRONG_INTERFACE_AUTOSELECTED" and c < LOW
    # a connect that failed at once (another errno) is not a refused address
    assert "NCCL_WRONG_INTERFACE_AUTOSELECTED" not in ids(explain([
        "node2:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect failed : Network is unreachable"]))[:1]

"""Native crash reports read with the backtrace under them (ddpdoctor/logscan/native.py)."""
import io

from ddpdoctor.logscan import explain_stream

HEAD = "[node1:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)"
EXIT = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 5283) "
        "of binary: /usr/bin/python")


def backtrace(*funcs: str) -> list[str]:
    # UCX ucs/debug/debug.c: "==== backtrace (tid:%7d) ====", frames "%2d 0x%016lx %s()  %s:%u"
    return (["==== backtrace (tid:   5704) ===="]
            + [f"{i:2d} 0x{0x43090 + i:016x} {f}()  ???:0" for i, f in enumerate(funcs)]
            + ["================================="])


def top(lines: list[str]):
    ds = explain_stream(io.BytesIO("\n".join(lines).encode()), "t").diagnoses
    return ds[0] if ds else None


def test_sigbus_in_nccl_frames_is_nccl_shm_not_the_dataloader():
    d = top([HEAD, *backtrace("killpg", "ncclGroupEnd", "start_thread", "clone"), EXIT])
    assert d.failure.id == "NCCL_SHM_TOO_SMALL" and d.confidence >= 0.5


def test_an_address_in_libnccl_without_a_symbol_counts_as_nccl():
    lines = [HEAD, "==== backtrace (tid:   3095) ====", " 0 0x0000000000043090 killpg()  ???:0",
             " 1 0x00000000000489b1 ???()  /usr/lib/x86_64-linux-gnu/libnccl.so.2:0", "====", EXIT]
    assert top(lines).failure.id == "NCCL_SHM_TOO_SMALL"


def test_sigbus_elsewhere_stays_the_dataloader_reading():
    d = top([HEAD, *backtrace("killpg", "memcpy", "THPStorage_newSharedFd", "start_thread"), EXIT])
    assert d.failure.id == "DATALOADER_SHM_BUS_ERROR"


def test_a_segfault_in_nccl_is_not_a_shm_diagnosis():
    d = top(["[node1:5283 :0:5704] Caught signal 11 (Segmentation fault: address not mapped to object at address "
             "0x8)", *backtrace("killpg", "ncclGroupEnd", "start_thread")])
    assert d is None or d.failure.id != "NCCL_SHM_TOO_SMALL"


def test_nccl_that_allocates_its_segments_up_front_leaves_it_low_confidence():
    # NCCL 2.19.1+ fallocate()s its /dev/shm segments (src/misc/shmutils.cc): a full /dev/shm fails with a WARN
    d = top(["node1:5283:5699 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", HEAD,
             *backtrace("killpg", "ncclGroupEnd", "start_thread")])
    assert d.failure.id == "NCCL_SHM_TOO_SMALL" and d.confidence < 0.5

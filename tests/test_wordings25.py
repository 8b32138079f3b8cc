"""Wordings users hit that no signature read (issue 23 §1 and §2), each learnt from the code that prints it, and the
typesetting a forum puts on a pasted log (curly quotes, dashes, `…`, no-break spaces), undone by the reader.

Lines are the emitting code's templates filled as those releases fill them: NCCL 2.16-2.30's socket connect give-up
(src/misc/socket.cc, src/os/linux.cc), NCCL 2.22.3+'s mkstemp of its /dev/shm file (src/misc/shmutils.cc,
src/os/linux.cc), torch 2.6+'s store connect retry (torch/csrc/distributed/c10d/socket.cpp), NCCL 2.30.3+'s
`Count not open` (src/misc/ibvsymbols.cc), CPython's KeyError for a launcher's variable, and cudaErrorDevicesUnavailable
in the words of CUDA <= 10 runtimes (torch's c10 and THC checks)."""
import io

import pytest

from ddpdoctor.logscan import default_matcher
from ddpdoctor.logscan.reader import blocks
from ddpdoctor.logscan.render import LOW, SHOW_FULL
from logtext import explain, found, ids

WARN = "node1:1234:1300 [0] {where} NCCL WARN "


@pytest.fixture(scope="module")
def matcher():
    return default_matcher()


# --- NCCL's /dev/shm file: the errno it carries decides between a full /dev/shm and one the user may not write -----

def shm_create(errno_text: str, errno: int, where: str = "misc/shmutils.cc:73", path: str = "/dev/shm/nccl-XXXXXX") -> str:
    return (WARN.format(where=where) + f"Error: failed to create shared memory file {path}, error {errno_text} ({errno})")


def test_a_full_dev_shm_at_file_creation_is_a_too_small_dev_shm():
    ex = explain([shm_create("No space left on device", 28, "os/linux.cc:656")])
    assert ids(ex)[0] == "NCCL_SHM_TOO_SMALL" and ex.diagnoses[0].confidence >= LOW


@pytest.mark.parametrize("errno_text,errno", [("Permission denied", 13), ("Read-only file system", 30)])
def test_a_dev_shm_the_user_may_not_write_is_a_permission_problem(errno_text, errno):
    ex = explain([shm_create(errno_text, errno)])
    assert ids(ex)[0] == "DEV_SHM_PERMISSION_DENIED" and ex.diagnoses[0].confidence >= LOW
    assert "NCCL_SHM_TOO_SMALL" not in ids(ex)[:1]


def test_nccl_2_22_prints_the_path_as_a_pointer_and_the_errno_still_decides():
    # v2.22.3-1 .. v2.23.4-1: WARN("... shared memory file %p, ...", shmPath, ...)
    ex = explain([shm_create("Permission denied", 13, path="0x7ffd3c2a1e40")])
    assert ids(ex)[0] == "DEV_SHM_PERMISSION_DENIED"


def test_another_errno_at_file_creation_is_neither_shm_mode_s_decisive_line(matcher):
    got = found(matcher, shm_create("Too many open files", 24))
    assert not {n for m, n in got if n in ("SHM_FILE_CREATE_NO_SPACE", "SHM_FILE_CREATE_DENIED")}


# --- NCCL's socket connect gives up -------------------------------------------------------------------------------

GIVE_UP = [
    # v2.16.2-1 .. v2.23.4-1: refusals and timeouts counted apart, no address, no errno
    WARN.format(where="misc/socket.cc:505") + "socketPollConnect: exceeded retries (20000)",
    WARN.format(where="misc/socket.cc:472") + "socketStartConnect: exceeded timeouts (3)",
    # v2.24.3-1 .. v2.26.6-1
    WARN.format(where="misc/socket.cc:543") + "socketPollConnect: connect returned Connection refused, exceeded error "
                                              "retry count (35)",
    # v2.27.3-1 .. v2.30.7-1 (ncclOsSocketPollConnect in src/os/linux.cc from 2.29)
    WARN.format(where="misc/socket.cc:578") + "socketPollConnect: connect to 22.11.219.25<47479> returned Connection "
                                              "refused, exceeded error retry count after 35 attempts",
    WARN.format(where="os/linux.cc:275") + "ncclOsSocketPollConnect: connect to 10.0.0.2<41637> returned Connection "
                                           "timed out, exceeded error retry count after 35 attempts",
]


@pytest.mark.parametrize("line", GIVE_UP)
def test_nccl_giving_up_on_a_peer_s_address_points_at_the_interface_it_advertised_without_deciding(line):
    ex = explain([line])
    assert ids(ex)[0] == "NCCL_WRONG_INTERFACE_AUTOSELECTED"
    # alone it is a candidate, not an answer: a peer that exited or a firewall print it as well
    assert ex.diagnoses[0].confidence < SHOW_FULL


def test_the_give_up_with_the_interface_nccl_chose_names_it():
    ex = explain(["node2:88:88 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
                  WARN.format(where="misc/socket.cc:578") + "socketPollConnect: connect to 172.17.0.1<45211> returned "
                  "Connection refused, exceeded error retry count after 35 attempts"])
    assert ids(ex)[0] == "NCCL_WRONG_INTERFACE_AUTOSELECTED" and ex.diagnoses[0].confidence >= SHOW_FULL


def test_no_route_to_host_at_the_give_up_stays_the_firewall_s(matcher):
    line = (WARN.format(where="misc/socket.cc:578") + "socketPollConnect: connect to 10.0.0.2<41637> returned No route "
            "to host, exceeded error retry count after 35 attempts")
    got = found(matcher, line)
    assert ("FIREWALL_BLOCKS_PORTS", "SOCKETPOLLCONNECT_CONNECT_RETURNED_NO_ROUTE") in got
    assert ("NCCL_WRONG_INTERFACE_AUTOSELECTED", "CONNECT_RETRIES_EXHAUSTED") not in got


def test_the_accept_side_give_up_is_not_a_connect_give_up(matcher):
    # socketTryAccept's WARN (too many open files on the listening side) shares the words "exceeded error retry count"
    line = (WARN.format(where="misc/socket.cc:448") + "socketTryAccept: exceeded error retry count after 35 attempts, "
            "Too many open files")
    assert ("NCCL_WRONG_INTERFACE_AUTOSELECTED", "CONNECT_RETRIES_EXHAUSTED") not in found(matcher, line)


# --- torch's store connect retry ----------------------------------------------------------------------------------

def test_torch_s_timed_out_store_connect_retry_points_at_the_endpoint():
    # torch 2.6+ (pytorch/pytorch#138003): each timed-out try warns, the last gives the client's timeout
    ex = explain(["[W416 15:12:21.131066630 socket.cpp:933] [c10d] The server socket on [::ffff:10.1.0.4]:40613 has "
                  "timed out, will retry.",
                  "[W416 15:37:25.363094293 socket.cpp:933] [c10d] The server socket on [::ffff:10.1.0.4]:40613 has "
                  "timed out, will retry."])
    d = ex.diagnoses[0]
    assert d.failure.id == "RDZV_ENDPOINT_UNREACHABLE" and SHOW_FULL <= d.confidence < LOW
    assert any("40613" in e.note for e in d.evidence)


# --- NCCL 2.30.3+'s "Count not open" (their typo): no gate word in the line --------------------------------------

@pytest.mark.parametrize("lib", ["libibverbs.so", "libibverbs.so.1", "/opt/rdma/lib/libibverbs.so.1"])
def test_the_scanner_finds_nccl_s_misspelt_libibverbs_line(matcher, lib):
    assert ("IB_DEVICE_NOT_VISIBLE", "FAILED_TO_OPEN_LIBIBVERBS_SO") in found(
        matcher, f"node1:55:55 [0] NCCL INFO Count not open {lib}")


def test_count_not_open_of_another_library_is_not_libibverbs(matcher):
    assert not found(matcher, "node1:55:55 [0] NCCL INFO Count not open libnccl-net.so")


# --- a launcher's variable read by the script, started without that launcher ------------------------------------

def _keyerror(var: str) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "main.py", line 72, in get_opt',
            f'    opt.dist_rank = int(os.environ["{var}"])',
            '  File "/usr/lib/python3.7/os.py", line 681, in __getitem__',
            "    raise KeyError(key) from None",
            f"KeyError: '{var}'"]


@pytest.mark.parametrize("var", ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "SLURM_PROCID",
                                 "LOCAL_RANK"])
def test_a_launcher_s_variable_missing_is_a_script_without_its_launcher_not_a_bug_in_the_script(var):
    ex = explain(_keyerror(var))
    assert ids(ex)[0] == "SCRIPT_WITHOUT_LAUNCHER"
    assert "USER_CODE_EXCEPTION" not in ids(ex)[:1]


def test_a_keyerror_for_a_variable_no_launcher_sets_is_the_script_s_own():
    ex = explain(_keyerror("DATA_ROOT"))
    assert "SCRIPT_WITHOUT_LAUNCHER" not in ids(ex)


# --- cudaErrorDevicesUnavailable in the words of older runtimes ---------------------------------------------------

@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",          # c10, CUDA <= 10.2
    "RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable at "
    "/pytorch/aten/src/THC/THCGeneral.cpp:50",                                              # THC
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=50 error=46 : all CUDA-capable devices are busy "
    "or unavailable",
])
def test_the_older_busy_or_unavailable_wording_reads_as_the_newer_one(line):
    old = explain([line])
    new = explain(["RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"])
    assert [(d.failure.id, d.confidence) for d in old.diagnoses] == [(d.failure.id, d.confidence) for d in new.diagnoses]
    assert {"GPU0_EXTRA_MEMORY", "DUPLICATE_GPU_PER_RANK"} <= set(ids(old)[:3])


# --- a log as a forum typesets it ---------------------------------------------------------------------------------

EN, EM, LQ, RQ, LDQ, RDQ, ELLIPSIS, NBSP, MINUS = "\u2013", "\u2014", "\u2018", "\u2019", "\u201c", "\u201d", "\u2026", \
    "\u00a0", "\u2212"


def typeset(line: str) -> str:
    """What smartypants-like renderers make of a pasted line: `--` as an en dash, quotes curly, `...` as one
    character, and every space no-break (what a copy out of a rendered HTML table or a notebook's output brings)."""
    out, double = [], False
    for i, ch in enumerate(line):
        if ch == "'":
            out.append(LQ if i == 0 or line[i - 1] in " (" else RQ)
        elif ch == '"':
            out.append(RDQ if double else LDQ)
            double = not double
        else:
            out.append(ch)
    return "".join(out).replace("...", ELLIPSIS).replace("--", EN).replace(" ", NBSP)


@pytest.mark.parametrize("line,mode", [
    # CPython argparse (Lib/argparse.py) as torchrun < 2.0 made it fail: `--local_rank` turned into an en dash
    ("train.py: error: unrecognized arguments: --local_rank=3", "LOCAL_RANK_ARG_MISMATCH"),
    # NCCL's CUDACHECK (src/include/checks.h): single quotes turned curly
    (WARN.format(where="include/alloc.h:48") + "Cuda failure 'invalid device ordinal'", None),
    # torch/distributed/rendezvous.py _env_error
    ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK expected, but "
     "not set", "SCRIPT_WITHOUT_LAUNCHER"),
    # NCCL 2.22.3+ (src/misc/shmutils.cc) with an ellipsis where the poster elided the path
    (WARN.format(where="misc/shmutils.cc:73") + "Error: failed to create shared memory file /dev/shm/nccl-..., error "
     "Permission denied (13)", "DEV_SHM_PERMISSION_DENIED"),
    # CPython os.environ KeyError: curly quotes around the variable
    ("KeyError: 'OMPI_COMM_WORLD_RANK'", "SCRIPT_WITHOUT_LAUNCHER"),
])
def test_a_typeset_paste_gets_the_answer_of_the_plain_log(line, mode):
    mangled = typeset(line)
    assert mangled != line and not mangled.isascii()
    plain, pasted = explain([line]), explain([mangled])
    assert [(d.failure.id, d.confidence) for d in pasted.diagnoses] == [(d.failure.id, d.confidence) for d in plain.diagnoses]
    if mode:
        assert ids(pasted)[0] == mode


def test_em_dashes_and_minus_signs_stand_for_the_flags_they_replaced():
    for dash in (EM, EN, MINUS + MINUS, "\u2010\u2010"):
        ex = explain([f"main.py: error: unrecognized arguments: {dash}local-rank=0 --lr 3"])
        assert ids(ex)[0] == "LOCAL_RANK_ARG_MISMATCH", dash


def test_typesetting_is_undone_without_moving_a_line_and_plain_blocks_are_left_alone():
    text = f"line one\nKeyError:{NBSP}{LQ}RANK{RQ}\n{ELLIPSIS}\nlast {EM}flag\n"
    (blk,) = list(blocks(io.BytesIO(text.encode())))
    assert blk.data == b"line one\nKeyError: 'RANK'\n...\nlast --flag\n"
    assert blk.newlines == 4 and blk.size == len(text.encode())
    plain = b"rank 0: step 10 loss 0.5\n" * 1000
    (blk,) = list(blocks(io.BytesIO(plain)))
    assert blk.data == plain


def test_a_typeset_log_keeps_the_line_numbers_of_its_evidence():
    lines = ["epoch 1", f"step 2 {ELLIPSIS}", typeset("KeyError: 'OMPI_COMM_WORLD_RANK'")]
    ex = explain(lines)
    assert ex.diagnoses[0].failure.id == "SCRIPT_WITHOUT_LAUNCHER"
    assert [e.line for e in ex.diagnoses[0].evidence] == [3]

"""Calibration of a first answer the log does not decide (issue 23): name it at low confidence, or name nothing.

A first diagnosis below LOW rests on lines other failures print as well (a generic symptom, a consequence,
a differential's candidate). Shown at SHOW_FULL or more it is named ("low confidence"); below SHOW_FULL the log
gets "No line in this log points clearly at a cause; possible:" with the same candidates, each with the line that
raised it and the command that decides. Which of the two is more often right is a count, not a belief: on the
dev split, per (first mode, basis) -- basis being the strongest signature behind it, or "rule" when only the
cross-line rules or the differential raised it -- how often the thread's label was that mode (naming it is right)
and how often UNKNOWN (naming nothing is right). Other labels are wrong either way and do not vote.

The rule: a key whose dev count has MARGIN (2) or more UNKNOWN than right is hidden (every diagnosis scaled so
that the first sits just below SHOW_FULL, order kept); MARGIN or more right than UNKNOWN is shown (lifted to
SHOW_FULL, never past the mode's catalog `ceiling`). A key with a smaller difference keeps what the ranker gave
it: a margin of one is one log, and a rule for one log is not a rule.

TALLY holds the dev counts (benchmarks/calibrate_explain.py prints them afresh; counted on the output before
this step, which changes no diagnosis's identity, only its confidence). Keys with no lean either way are listed
too, so the table says what was looked at.
"""
from __future__ import annotations

SHOW_FULL = 0.35  # render: diagnoses at or above it get a full section (named)
LOW = 0.5         # render: below it a diagnosis is marked "low confidence" and weaker alternatives are shown
RULE = "rule"
MARGIN = 2
HIDDEN = 0.34     # just below SHOW_FULL: the first candidate of "possible:"

# (first mode, basis): (label was that mode, label UNKNOWN, another label) among dev logs whose first answer was that
# key below LOW. Dev split of 2026-11-26 (533 logs), benchmarks/calibrate_explain.py; keys seen once are left
# out (one log cannot reach MARGIN). What the counts decided:
# * hidden: NCCL_SYSTEM_ERROR on `internal error` alone (0 right, 2 UNKNOWN). ncclInternalError is NCCL's "internal
#   check failed" (nccl.h: "either a bug in NCCL or due to memory corruption"), not a failed system call; the
#   system-error causes the differential lists are possibilities, not a reading of the line. The other hidden keys
#   were below SHOW_FULL already: the hung-watchdog heartbeat (2 against 4), a bare `Connection refused` (0/3), a
#   CUDA_VISIBLE_DEVICES value alone (0/2), a store socket timeout (0/2).
# * shown: every key that leans to naming (the collective timeouts 25/0, the invalid ordinal 7/3, the NCCL system
#   error itself 5/2, ...) was at SHOW_FULL or above already.
# * no lean (a margin under 2): HOSTNAME_UNRESOLVABLE on a failed lookup (4/3), ncclInvalidUsage read as two ranks
#   on one GPU (2/2), WORKER_NATIVE_CRASH on torchrun's signal line (3/2: its catalog ceiling keeps it at 0.3
#   anyway), the hung watchdog (1/1), a Gloo full-mesh connect (1/1), an illegal access seen by NCCL (1/1).
TALLY: dict[tuple[str, str], tuple[int, int, int]] = {
    ('COLLECTIVE_MISMATCH_ACROSS_RANKS', 'IB_COLLECTIVE_SIZE_MISMATCH'): (1, 0, 1),
    ('CUDA_KERNEL_ERROR', 'ILLEGAL_ACCESS_SEEN_BY_NCCL'): (1, 1, 0),
    ('CUDA_VISIBLE_DEVICES_HIDES_GPUS', 'rule'): (0, 2, 0),
    ('DATALOADER_OPEN_FILES_LIMIT', 'SHM_OPEN_FAILED_NO_REASON'): (2, 0, 0),
    ('DDP_MODEL_MISMATCH_ACROSS_RANKS', 'OTHER_RANK_ZERO_PARAMS'): (3, 0, 0),
    ('DUPLICATE_GPU_PER_RANK', 'NCCLINVALIDUSAGE'): (2, 2, 1),
    ('FABRIC_MANAGER_NOT_RUNNING', 'NCCL_WARN_CUDA_FAILURE_INVALID'): (4, 0, 1),
    ('FIREWALL_BLOCKS_PORTS', 'NO_ROUTE_TO_HOST'): (0, 1, 1),
    ('GLOO_ADDRESS_UNREACHABLE', 'CONNECTFULLMESH_REASON_LOST'): (1, 1, 0),
    ('GLOO_COLLECTIVE_TIMEOUT', 'APPLICATION_TIMEOUT_PAIR_CLOSURE'): (2, 0, 0),
    ('GLOO_COLLECTIVE_TIMEOUT', 'TIMED_OUT_WAITING'): (4, 0, 1),
    ('GLOO_PEER_EXITED', 'ERROR'): (4, 0, 0),
    ('GPU_OUT_OF_MEMORY', 'ERROR_CUDA_OUT_OF_MEMORY'): (3, 0, 0),
    ('HOSTNAME_UNRESOLVABLE', 'NAME_LOOKUP_FAILED'): (4, 3, 1),
    ('HOST_OOM_SIGKILL', 'rule'): (2, 0, 0),
    ('IB_FABRIC_FAULT', 'NCCL_REMOTE_ERROR'): (4, 0, 0),
    ('IB_ROCE_GID_MISMATCH', 'GOT_COMPLETION'): (2, 0, 1),
    ('LAUNCHER_SSH_UNREACHABLE', 'COLOSSALAI_RUN_FAILED_ON_HOST'): (2, 0, 0),
    ('MASTER_PORT_IN_USE', 'ERROR'): (4, 0, 0),
    ('NCCL_COLLECTIVE_TIMEOUT', 'NCCL_WATCHDOG'): (25, 0, 0),
    ('NCCL_COLLECTIVE_TIMEOUT', 'WATCHDOG_CHECKTIMEOUT_FRAME'): (3, 0, 0),
    ('NCCL_SHM_TOO_SMALL', 'ERROR_WHILE_CREATING_SHARED_MEMORY'): (3, 1, 1),
    ('NCCL_SYSTEM_ERROR', 'NCCL_INTERNAL_ERROR'): (0, 2, 0),
    ('NCCL_SYSTEM_ERROR', 'NCCL_SYSTEM_ERROR'): (5, 2, 1),
    ('NCCL_WATCHDOG_HUNG', 'HEARTBEAT_MONITOR_TIMED_OUT'): (2, 4, 0),
    ('NCCL_WATCHDOG_HUNG', 'WATCHDOG_GOT_STUCK'): (1, 1, 0),
    ('NPROC_EXCEEDS_GPUS', 'CUDA_INVALID_ORDINAL'): (7, 3, 1),
    ('NPROC_EXCEEDS_GPUS', 'rule'): (2, 0, 0),
    ('RDZV_ENDPOINT_UNREACHABLE', 'RDZV_CONNECTION_ERROR'): (2, 0, 0),
    ('RDZV_ENDPOINT_UNREACHABLE', 'STORE_CONNECT_FAILED_2'): (3, 0, 0),
    ('RDZV_ENDPOINT_UNREACHABLE', 'STORE_CONNECT_TIMEOUT'): (5, 1, 1),
    ('RDZV_ENDPOINT_UNREACHABLE', 'rule'): (0, 3, 0),
    ('RDZV_NODES_MISSING', 'STORE_SOCKET_TIMEOUT'): (0, 2, 0),
    ('RDZV_STORE_HOST_EXITED', 'FAILED_TO_RECV_GOT_0'): (1, 0, 1),
    ('SCRIPT_WITHOUT_LAUNCHER', 'KEYERROR_RANK_VARIABLE'): (4, 0, 0),
    ('USER_CODE_EXCEPTION', 'rule'): (6, 0, 2),
    ('WINDOWS_HOSTS_FILE_REVERSE_NAME', 'SYSTEM_ERROR_10049'): (0, 1, 1),
    ('WORKER_NATIVE_CRASH', 'TORCHRUN_FAILED_NATIVE_SIGNAL'): (3, 2, 0),
}


def decision(key: tuple[str, str]) -> str:
    right, unknown, _ = TALLY.get(key, (0, 0, 0))
    if unknown - right >= MARGIN:
        return "hide"
    if right - unknown >= MARGIN:
        return "show"
    return ""


def calibrate(out: list) -> None:
    """Apply the tally's decision to the first diagnosis when it is below LOW."""
    if not out or out[0].confidence >= LOW:
        return
    top = out[0]
    key = (top.failure.id, top.basis)
    right, unknown, other = TALLY.get(key, (0, 0, 0))
    what = decision(key)
    if what == "hide" and top.confidence >= SHOW_FULL:
        f = HIDDEN / top.confidence
        for d in out:
            d.confidence = round(d.confidence * f, 6)
        top.notes.append(f"low confidence, not named: of the collected threads whose log rested on this line "
                         f"alone ({top.basis}), {unknown} found no cause and {right} found this one; the candidates "
                         "are possibilities, each with what would decide it")
    elif what == "show" and top.confidence < SHOW_FULL <= top.failure.ceiling:
        top.confidence = SHOW_FULL
        top.notes.append(f"low confidence, named: of the collected threads whose log rested on this line "
                         f"({top.basis}), {right} found this cause and {unknown} found none")

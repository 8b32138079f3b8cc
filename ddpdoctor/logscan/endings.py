"""The differential of the generic endings many posted logs stop at (issue 23, "absent" logs): a worker that
exited 1 (or was torn down) while only the launcher's summary is in the log (torchrun's, srun's, mp.spawn's with the
child's traceback cut), NCCL's bare `unhandled cuda error` and `invalid argument`, a SIGBUS, a store-based barrier
timeout cut before its counts, and a log that stops in NCCL's set-up output with no error. The ending stays what the log shows (its own mode
at low confidence, or nothing named, "unknown"); the causes behind it follow as weaker alternatives (symptoms.py's
CANDIDATE / WEAKER, below render.SHOW_FULL, so never a confident answer), each with the line that raised it and the
command that decides. symptoms.symptom_differential calls these, with its `cand` (no mode added twice, nothing
when a decisive line or rule already names the cause).

What the emitting code says each ending means, and so which candidates:
* exit code 1 without the worker's traceback: torch elastic's agent reports a worker's exit code (elastic/
  multiprocessing/api.py `failed (exitcode: %d) local_rank: %d`) and, without an error file, `error_file: <N/A>`
  and "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html" (errors/__init__.py
  ProcessFailure, torch 1.9 .. 2.13): the worker's error file is written only by an entry point decorated with
  `@record` (errors/__init__.py record -> ErrorHandler.record_exception, to TORCHELASTIC_ERROR_FILE). CPython exits 1
  after printing an uncaught exception to stderr (Python/pythonrun.c: PyErr_Print, then Py_Exit(1) in
  Modules/main.c pymain_run_python): so the cause is a Python exception whose traceback went to that rank's stderr.
  Which one: of the modes whose worker raises (FREQUENT.md, all 822 corpus logs): USER_CODE_EXCEPTION 18 and
  GPU_OUT_OF_MEMORY 17 are the two that a torchrun job raises inside its training code (SCRIPT_WITHOUT_LAUNCHER and
  CUDA_REINIT_IN_FORKED_SUBPROCESS do not happen under torchrun's env:// set-up); dev logs showing ChildFailedError:
  GPU_OUT_OF_MEMORY 2 besides HOST_OOM_SIGKILL 5 (those show -9, HOST_OOM_SIGKILL's own sign).
* torchrun tearing the group down (`Sending process N closing signal SIGTERM`, api.py _close) with no worker's exit
  code, signal or error in the log: some worker failed first. Dev logs with that line: HOST_OOM_SIGKILL 7 (a worker
  killed by the kernel leaves no traceback, only its exit code -9, cut from such a paste), USER_CODE_EXCEPTION 1.
* `unhandled cuda error` is ncclUnhandledCudaError (NVIDIA/nccl src/init.cc ncclGetErrorString, v2.4 .. v2.30): a
  CUDA call inside NCCL failed; NCCL's WARN just before it names the CUDA error (checks.h CUDACHECK
  `Cuda failure '%s'`, cudawrap.h CUCHECK `Cuda failure %d '%s'`; fact `nccl_cuda_failure`). With that WARN, its
  CUDA error string picks the candidates (_CUDA_ERRORS); without it, the order comes from the dev logs that show the
  line: FABRIC_MANAGER_NOT_RUNNING 2, CUDA_DRIVER_TOO_OLD 1, GPU_HARDWARE_FAULT 1, WSL_NCCL_UNSUPPORTED 1,
  CONSUMER_GPU_P2P_BROKEN 1, IB_ROCE_GID_MISMATCH 1, UNKNOWN 5 (the last three read by their own clues: a WSL or
  GeForce line in the log moves its mode first).
* SIGBUS (torchrun `exitcode: -7`, `Signal 7 (SIGBUS)`, Open MPI's `Signal: Bus error (7)`) is what a page of a
  /dev/shm file that tmpfs cannot back raises at its first touch (Linux mm/shmem.c shmem_fault: VM_FAULT_SIGBUS).
  failure-catalog.md §3 reads -7 as DATALOADER_SHM_BUS_ERROR, whose `related` lists NCCL_SHM_TOO_SMALL: NCCL's
  shared-memory transport maps /dev/shm segments too (native.py). Dev logs with -7/SIGBUS: DATALOADER_SHM_BUS_ERROR
  10, NCCL_SHM_TOO_SMALL 3. So without a DataLoader message of its own, NCCL's reading is the weaker alternative.
* the store-based barrier timeout (distributed_c10d.py _store_based_barrier: "Timed out initializing process group
  in store based barrier on rank: %d, for key: %s (world_size=%d, worker_count=%d, ...)", num_workers_joined in
  2.x) cut before its counts: the counts decide between more processes than the world (STORE_BARRIER_WORKER_COUNT_
  MISMATCH, the line's own mode) and fewer; that mode's `related` names the two ways extra processes join one store:
  SLURM_NTASKS_MISMATCH (srun starts a launcher per task) and MASTER_PORT_IN_USE (another job on the same port).
"""
from __future__ import annotations

import re

from ddpdoctor.catalog.model import CLUE
from ddpdoctor.logscan.calibration import CANDIDATE, WEAKER, WEAKEST
from ddpdoctor.logscan.evidence import Collector, Evidence

DECIDES = 0.5      # a CUDA error string that names its cause (ranker.DECISIVE)

RECORD = ("`from torch.distributed.elastic.multiprocessing.errors import record` and `@record` on the script's main "
          "(torchrun then prints that rank's traceback in its summary), or that rank's own stderr: `torchrun --tee 3` / "
          "`--redirects 3 --log-dir DIR`")
# the signatures read by name; tests/test_differential_endings.py checks they exist
SIGNATURES_USED = (("WSL_NCCL_UNSUPPORTED", "UNHANDLED_CUDA_ERROR"), ("USER_CODE_EXCEPTION", "WORKER_EXIT_1"),
                   ("STORE_BARRIER_WORKER_COUNT_MISMATCH", "STORE_BARRIER_TIMEOUT_UNCOUNTED"),
                   ("STORE_BARRIER_WORKER_COUNT_MISMATCH", "TIMED_OUT_INITIALIZING_PROCESS_GROUP"),
                   ("DATALOADER_SHM_BUS_ERROR", "FAILED_EXITCODE_7_LOCAL_RANK"),
                   ("DATALOADER_SHM_BUS_ERROR", "SIGNAL_7_SIGBUS_RECEIVED_BY"), ("DATALOADER_SHM_BUS_ERROR", "OMPI_SIGNAL_BUS"),
                   ("WSL_NCCL_UNSUPPORTED", "WSL_KERNEL"), ("WSL_NCCL_UNSUPPORTED", "WSL_LIB_PATH"),
                   ("WSL_NCCL_UNSUPPORTED", "WSL_MENTIONED"), ("WSL_NCCL_UNSUPPORTED", "WINDOWS_DESKTOP_HOST"),
                   ("CONSUMER_GPU_P2P_BROKEN", "GEFORCE_RTX_40"))
_BUS = SIGNATURES_USED[4:7]
_WSL = SIGNATURES_USED[7:11]


def _ev(v) -> Evidence:
    return Evidence(v.line, v.text, v.host, v.rank)


def _hits(col: Collector, sigs) -> list[Evidence]:
    names = set(sigs)
    return sorted((e for (fid, _), st in col.sigs.items() if (fid, st.signature.name) in names
                   for e in st.first + ([st.last] if st.last else [])), key=lambda e: e.line)


def ending_differential(col: Collector, cand, caps) -> None:
    """The undecided endings (called only when no decisive line or rule names the cause)."""
    _stopped_in_nccl_setup(col, cand, caps)
    _exit_without_traceback(col, cand)
    _nccl_invalid_argument(col, cand)
    _unhandled_cuda(col, cand)
    _store_barrier_uncounted(col, cand, caps)


def sigbus_alternative(col: Collector, add, named) -> None:
    """SIGBUS says which signal, not whose /dev/shm page: beside the DataLoader's reading (catalog §3), NCCL's shm
    transport, unless a DataLoader message of its own or a rule (native.py: SIGBUS in NCCL's frames) decided.
    Runs even when the -7 signature decided the log (it names the signal, not the process that mapped the page)."""
    bus = _hits(col, _BUS)
    have = named()
    if not bus or "NCCL_SHM_TOO_SMALL" in have:
        return
    own = [e for (fid, _), st in col.sigs.items() if fid == "DATALOADER_SHM_BUS_ERROR"
           and (fid, st.signature.name) not in _BUS for e in st.first]
    if own or have.get("DATALOADER_SHM_BUS_ERROR", (0.0, False))[1]:
        return
    add("NCCL_SHM_TOO_SMALL", CANDIDATE, "SIGBUS is how a /dev/shm page that tmpfs cannot back faults; no DataLoader "
        "message says its worker was the one: NCCL's shared-memory transport maps /dev/shm segments as well; decide "
        "with: `df -h /dev/shm` where the job runs (64M: a container without --shm-size / --ipc=host), then "
        "NCCL_SHM_DISABLE=1 <rerun> (works => NCCL's segments) or DataLoader(num_workers=0) (works => the "
        "DataLoader's)", bus[:1])


# the launchers' own exceptions that wrap a worker's failure (torch/distributed/elastic/multiprocessing/errors
# ChildFailedError; torch/multiprocessing/spawn.py ProcessRaisedException, whose message carries the child's traceback,
# and ProcessExitedException): raised by the launcher, not by the worker
_LAUNCHER_RAISES = re.compile(r"(?:ChildFailedError|ProcessRaisedException|ProcessExitedException)$")


def _failure_lines(col: Collector) -> bool:
    """Any line of a failure (not a clue) besides the generic exit-code reading of USER_CODE_EXCEPTION."""
    return any(st.signature.role != CLUE for st in col.sigs.values())


def _exit_without_traceback(col: Collector, cand) -> None:
    t = col.user
    if _failure_lines(col) or t.raised or t.open_tb:
        return   # the log holds a failure line or the worker's own exception: that reading, not this one
    codes = [v for name in ("torchrun_failed", "summary_exit", "srun_exit") for v in col.facts.get(name, [])]
    excs = col.facts.get("exception", [])
    child = [v for v in excs if _LAUNCHER_RAISES.search(v.value.get("exc", ""))]
    if len(child) < len(excs):
        return   # an exception of the worker itself is in the log (one no signature reads): not this ending
    ones = [v for v in codes if v.value.get("code") == "1"]
    if codes and not ones:
        return   # another exit code: a signal has its own modes (HOST_OOM_SIGKILL, WORKER_NATIVE_CRASH), 2 is argparse
    no_file = [v for v in col.facts.get("error_file", []) if v.value.get("file") == "<N/A>"]
    spawned = col.facts.get("spawn_child_failed", [])
    if spawned and not ones:
        # mp.spawn carries the child's traceback in its own exception: here it is cut before the exception line
        first = [_ev(spawned[0])]
        cand("USER_CODE_EXCEPTION", CANDIDATE, f"the log ends with mp.spawn's report that process "
             f"{spawned[0].value.get('index')} raised (line {spawned[0].line}), and the child's traceback is cut before "
             "its exception line; decide with: the rest of that traceback (the end of the job's output)", first)
        cand("GPU_OUT_OF_MEMORY", WEAKER, "the exception a training step raises most often is torch.cuda."
             "OutOfMemoryError; decide with: the child's exception line, `nvidia-smi` while it runs", first)
        return
    if ones or child:
        first = [_ev(v) for v in (ones or child)[:1]] + [_ev(v) for v in no_file[:1]]
        what = (f"a worker exited with code 1 (line {ones[0].line})" if ones else
                f"the launcher's {child[0].value.get('exc', '').rsplit('.', 1)[-1]} (line {child[0].line}) without the "
                "worker's exception")
        nofile = (", and `error_file: <N/A>`: the worker wrote no error file (its main is not decorated with @record)"
                  if no_file else "")
        cand("USER_CODE_EXCEPTION", CANDIDATE, f"the log ends with the launcher's report: {what}{nofile}; exit code 1 "
             "is CPython's for an uncaught exception, whose traceback went to that rank's stderr, not into this log; "
             f"decide with: {RECORD}", first)
        cand("GPU_OUT_OF_MEMORY", WEAKER, "the exception a training step raises most often is torch.cuda."
             "OutOfMemoryError (exit code 1 as well); decide with: that rank's traceback (" + RECORD.split(", or ")[0]
             + "), `nvidia-smi --query-gpu=memory.used,memory.total --format=csv -l 5` while it runs", first)
        return
    stops = col.facts.get("stop_sent", [])
    if stops and not codes and not child:
        first = [_ev(stops[0])]
        cand("HOST_OOM_SIGKILL", CANDIDATE, "the log ends with torchrun stopping the other workers (`closing signal "
             "SIGTERM`): one worker had already died, and neither its exit code nor an error is in this log; a worker "
             "killed by the kernel's OOM killer leaves no traceback; decide with: the `exitcode :` line of torchrun's "
             "summary (-9 = killed), `dmesg -T | grep -i -E 'killed process|out of memory'` on that node", first)
        cand("USER_CODE_EXCEPTION", WEAKER, "or the first worker raised an exception (exit code 1) whose traceback "
             f"is in its own stderr; decide with: {RECORD}", first)


# NCCL's `Cuda failure '<cudaGetErrorString>'`: the CUDA error strings (CUDA runtime / driver API docs) that point at
# a catalog mode, with what decides. Checked in order; the first that matches the string gives the candidates.
_CUDA_ERRORS = (
    # cudaErrorCallRequiresNewerDriver's own words: the driver is older than the call NCCL made (decides)
    (re.compile(r"(?i)not supported in the installed CUDA driver"), (
        ("CUDA_DRIVER_TOO_OLD", DECIDES, "CUDA says the call needs a newer driver than the one installed",
         "`nvidia-smi` (its `CUDA Version`) against the `+cudaX.Y` of `NCCL version` (NCCL_DEBUG=INFO)"),)),
    (re.compile(r"(?i)unsupported display driver|forward compatibility"), (
        ("CUDA_DRIVER_TOO_OLD", CANDIDATE, "the driver does not support the CUDA this NCCL was built for (or a "
         "cuda-compat package on a GPU it does not support)",
         "`nvidia-smi` (its `CUDA Version`) against the `+cudaX.Y` of `NCCL version` (NCCL_DEBUG=INFO)"),)),
    # (`peer access is not supported` is CONSUMER_GPU_P2P_BROKEN's own signature; this is the exhausted mappings)
    (re.compile(r"(?i)peer mapping"), (
        ("CONSUMER_GPU_P2P_BROKEN", CANDIDATE, "CUDA refused GPU peer-to-peer access between two GPUs",
         "NCCL_P2P_DISABLE=1 <rerun> (works => the P2P path), `nvidia-smi topo -m`"),
        ("NCCL_P2P_ACS_IOMMU_HANG", WEAKER, "PCIe ACS / an IOMMU between the GPUs breaks peer-to-peer transfers",
         "`sudo lspci -vvv | grep -i acsctl`, NCCL_P2P_DISABLE=1 <rerun>"))),
    (re.compile(r"(?i)unknown error|uncorrectable ECC|GPU is lost|fallen off|hardware"), (
        ("GPU_HARDWARE_FAULT", CANDIDATE, "a GPU that faulted fails every CUDA call on it",
         "`sudo dmesg -T | grep -i xid` and `nvidia-smi -q | grep -i -A3 ecc` on that node"),)),
    (re.compile(r"(?i)illegal memory access|illegal address|unspecified launch failure|misaligned"), (
        ("CUDA_KERNEL_ERROR", CANDIDATE, "a kernel faulted earlier on that GPU; NCCL's next CUDA call reports it",
         "CUDA_LAUNCH_BLOCKING=1 <rerun> (the failing kernel's own traceback)"),
        ("GPU_HARDWARE_FAULT", WEAKER, "or the GPU itself faulted", "`sudo dmesg -T | grep -i xid`"))),
    (re.compile(r"(?i)invalid argument|operation not supported|not supported"), (
        ("NCCL_RELEASE_BUG", CANDIDATE, "a CUDA call NCCL makes with arguments this driver or GPU rejects: an NCCL "
         "release older or newer than what the driver and GPU support",
         "the same job with another NCCL release (`pip install nvidia-nccl-cu12==<version>`; the `NCCL version` line "
         "of NCCL_DEBUG=INFO says which one runs)"),
        ("CUDA_DRIVER_TOO_OLD", WEAKER, "or a driver older than the CUDA features that NCCL release uses",
         "`nvidia-smi` (driver and its `CUDA Version`) against the `+cudaX.Y` of `NCCL version`"))),
)
# without the WARN line: the dev corpus order (module docstring)
_BARE = (
    ("FABRIC_MANAGER_NOT_RUNNING", CANDIDATE, "on NVSwitch systems (HGX/DGX with 8 SXM GPUs) every CUDA call fails "
     "until nvidia-fabricmanager runs (`system not yet initialized`)",
     "`systemctl status nvidia-fabricmanager`, `nvidia-smi -q | grep -i -A2 fabric`"),
    ("CUDA_DRIVER_TOO_OLD", WEAKER, "a CUDA call that the installed driver does not support",
     "`nvidia-smi` (its `CUDA Version`) against the `+cudaX.Y` of `NCCL version` (NCCL_DEBUG=INFO)"),
    ("GPU_HARDWARE_FAULT", WEAKER, "a GPU that faulted fails every CUDA call on it",
     "`sudo dmesg -T | grep -i xid` on the nodes, `nvidia-smi`"),
)


def _unhandled_cuda(col: Collector, cand) -> None:
    bare = _hits(col, (("WSL_NCCL_UNSUPPORTED", "UNHANDLED_CUDA_ERROR"),))
    warns = col.facts.get("nccl_cuda_failure", [])
    if not bare and not warns:
        return
    head = "NCCL's `unhandled cuda error` (ncclUnhandledCudaError: a CUDA call inside NCCL failed)"
    if warns:
        w = warns[0]
        what = w.value.get("what", "")
        if "nvls" in w.text.lower():
            return   # NVLink SHARP's `invalid argument`: FABRIC_MANAGER_NOT_RUNNING's and CUDA_DRIVER_TOO_OLD's own lines
        for rx, cands in _CUDA_ERRORS:
            if rx.search(what):
                for fid, weight, why, decide in cands:
                    cand(fid, weight, f"NCCL's CUDA call failed with '{what}' (line {w.line}): {why}; decide with: "
                         f"{decide}", [_ev(w)] + bare[:1])
                return
        return   # a CUDA error string none of these modes explains: the WARN itself is the answer to read
    evs = bare[:1]
    wsl = _hits(col, _WSL)
    if wsl:
        cand("WSL_NCCL_UNSUPPORTED", CANDIDATE, f"{head} and the log shows Windows / WSL ({wsl[0].text.strip()[:60]}): "
             "NCCL's P2P and shared-memory paths fail there with several GPUs; decide with: NCCL_P2P_DISABLE=1 "
             "NCCL_SHM_DISABLE=1 <rerun> (works => this)", wsl[:1] + evs)
    geforce = _hits(col, (("CONSUMER_GPU_P2P_BROKEN", "GEFORCE_RTX_40"),))
    if geforce:
        cand("CONSUMER_GPU_P2P_BROKEN", CANDIDATE, f"{head} on GeForce GPUs, whose peer-to-peer transfers the driver "
             "does not support; decide with: NCCL_P2P_DISABLE=1 <rerun> (works => this)", geforce[:1] + evs)
    for fid, weight, why, decide in _BARE:
        if fid == "CUDA_DRIVER_TOO_OLD" and _driver_covers_build(col):
            continue   # the log shows a driver for this NCCL's CUDA major (rules.driver_older_than_build's reading)
        cand(fid, weight if not (wsl or geforce) else WEAKER, f"{head}, and no `Cuda failure '...'` WARN in this log to "
             f"say which: {why}; decide with: NCCL_DEBUG=INFO <rerun> (the `NCCL WARN Cuda failure` line names the "
             f"CUDA error), {decide}", evs)


def _driver_covers_build(col: Collector) -> bool:
    """NCCL's `cudaDriverVersion N` and `NCCL version x+cudaM.m` lines both present, and every driver supports the
    CUDA major NCCL was built for (CUDA's minor-version compatibility): the log rules a too-old driver out."""
    builds = [v.value["cuda"] for v in col.facts.get("nccl_version", []) if v.value.get("cuda")]
    drivers = [int(v.value["v"]) for v in col.facts.get("cuda_driver_version", []) if v.value.get("v", "").isdigit()]
    if not builds or not drivers:
        return False
    need = max(int(b.split(".")[0]) for b in builds)
    return min(drivers) // 1000 >= need


def _store_barrier_uncounted(col: Collector, cand, caps) -> None:
    cut = _hits(col, (("STORE_BARRIER_WORKER_COUNT_MISMATCH", "STORE_BARRIER_TIMEOUT_UNCOUNTED"),))
    if not cut or _hits(col, (("STORE_BARRIER_WORKER_COUNT_MISMATCH", "TIMED_OUT_INITIALIZING_PROCESS_GROUP"),)):
        return   # with its counts, the line's own signature reads them
    evs = cut[:1]
    caps.set("STORE_BARRIER_WORKER_COUNT_MISMATCH", 0.3, "low confidence: init_process_group's store-based barrier "
             "timed out, but the line is cut before `(world_size=N, worker_count=M)`, which says whether more processes "
             "joined than the world holds (this mode) or fewer arrived (a rank that failed or was still busy before "
             "init_process_group: its own log decides)")
    decide = ("the full line's `(world_size=N, worker_count=M)` (M > N: extra processes joined; M < N: some never "
              "arrived), and the launch line of every node")
    cand("SLURM_NTASKS_MISMATCH", WEAKER, "the store-based barrier of init_process_group timed out and the line is cut "
         "before its counts; under Slurm, srun starting a launcher per task (each with its own workers) puts more "
         f"processes in one store than the world; decide with: {decide} (`--ntasks-per-node` against torchrun's "
         "--nproc-per-node)", evs)
    cand("MASTER_PORT_IN_USE", WEAKER, "another job (or a stale one) on the same MASTER_PORT joins the same store; "
         f"decide with: `ss -ltnp | grep <port>` on the master while it starts, and {decide}", evs)


# NCCL's set-up lines (NCCL_DEBUG=INFO): its version, the driver's CUDA, the network it chose, each rank's device at
# `Init COMPLETE`, the NCCL_* variables it read (facts.py)
_NCCL_SETUP = ("nccl_version", "cuda_driver_version", "nccl_net", "nccl_dev", "nccl_env")
NEAR_END = 1   # lines after NCCL's last set-up line that still count as "the log stops there"


def _stopped_in_nccl_setup(col: Collector, cand, caps) -> None:
    """A log with no failure line that stops in (or right after) NCCL's set-up output: the job hung there, at the
    communicator's creation or its first collective (NCCL prints nothing more until it completes), or the paste stops
    before the error. Nothing in such a log says which; its clue lines (a GeForce card, `NET/IB : No device found`, a
    Windows host), dropped from a log without a failure, are then the candidates, capped at a clue's weight
    (calibration.CLUE_ONLY_MAX); without any, a hang in the first collective's transport (symptoms.py's reading of a
    timeout at SeqNum <= 2): the GPUs' peer path on one host, the network between several. Dev logs that stop so:
    CONSUMER_GPU_P2P_BROKEN 3, IB_DEVICE_NOT_VISIBLE 3, NCCL_P2P_ACS_IOMMU_HANG 1, WSL_NCCL_UNSUPPORTED 1,
    CUDA_DRIVER_TOO_OLD 1, NCCL_ENV_MISMATCH_ACROSS_NODES 1, UNKNOWN 2."""
    if col.failed or not col.lines:
        return
    setup = [v for name in _NCCL_SETUP for v in col.facts.get(name, [])]
    if not setup:
        return
    clues = {}
    for (fid, _), st in col.sigs.items():
        clues.setdefault(fid, []).extend(st.first + ([st.last] if st.last else []))
    # the last of NCCL's own lines (its set-up facts, and clue lines NCCL printed, `NET/IB : No device found`)
    last = max([v.line for v in setup] + [e.line for evs in clues.values() for e in evs if "NCCL INFO" in e.text])
    if col.lines - last > NEAR_END:
        return   # the job went on after NCCL's set-up: a healthy log, or one whose failure no line here shows
    end = _ev(max(setup, key=lambda v: v.line))
    where = f"the log stops at NCCL's set-up output (line {end.line} of {col.lines}) with no error: the job hung there " \
            "(creating the communicator or in its first collective, after which NCCL prints nothing until it " \
            "completes), or the paste stops before the error"
    _driver_minor_behind(col, cand, where)
    if clues:
        for fid, evs in sorted(clues.items(), key=lambda kv: kv[1][0].line):
            first = sorted(evs, key=lambda e: e.line)[0]
            fm = col.failures.get(fid)
            confirm = f"`{fm.confirm}`" if fm is not None and fm.confirm else f"`ddpdoctor explain {fid}`"
            cand(fid, CANDIDATE, f"{where}; line {first.line} makes this possible; decide with: {confirm}, and "
                 "`py-spy dump --pid <a rank's pid>` while it hangs (where it waits)", [first, end])
            caps.set(fid, 0.3, "low confidence: only an INFO line of this mode, in a log that shows no error")
        return
    hosts = {v.host for v in setup if v.host}
    if len(hosts) >= 2:
        cand("FIREWALL_BLOCKS_PORTS", CANDIDATE, f"{where}; on {len(hosts)} hosts the first collective is the first "
             "use of NCCL's own connections between them (other ports than the rendezvous); decide with: `ddpdoctor "
             "network` on each node", [end])
        cand("NCCL_WRONG_INTERFACE_AUTOSELECTED", WEAKER, f"{where}; NCCL may have picked an interface the nodes do "
             "not share; decide with: the `NET/Socket : Using` line of each node, NCCL_SOCKET_IFNAME=<the interface "
             "they share> <rerun>", [end])
        return
    cand("NCCL_P2P_ACS_IOMMU_HANG", CANDIDATE, f"{where}; on one host the first collective is the first GPU "
         "peer-to-peer transfer, which stalls behind PCIe ACS / an IOMMU; decide with: NCCL_P2P_DISABLE=1 <rerun> "
         "(works => the P2P path), `sudo lspci -vvv | grep -i acsctl`", [end])
    cand("CONSUMER_GPU_P2P_BROKEN", WEAKER, f"{where}; GeForce / workstation GPUs whose P2P the driver does not "
         "support hang the same way; decide with: `nvidia-smi -L` (the GPU model), NCCL_P2P_DISABLE=1 <rerun>", [end])
    nets = set(col.fact_values("nccl_net", "net"))
    if nets == {"Socket"}:
        sock = _ev(next(v for v in col.facts["nccl_net"] if v.value.get("net") == "Socket"))
        cand("IB_DEVICE_NOT_VISIBLE", WEAKER, f"{where}; NCCL chose plain sockets (line {sock.line}) and no NET/IB: "
             "if the nodes have InfiniBand / RoCE, NCCL does not see it (a container without /dev/infiniband, no "
             "rdma-core); decide with: `ibv_devinfo` where the job runs, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
             [sock])


def _driver_minor_behind(col: Collector, cand, where: str) -> None:
    """NCCL's `cudaDriverVersion N` (cuDriverGetVersion: 1000*major + 10*minor) below the CUDA of `NCCL version
    x+cudaM.m`, within one major (rules.driver_older_than_build reads a major behind, in a failing log). CUDA's
    minor-version compatibility runs such a build on the older driver, but a call the driver does not have yet fails
    with cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver" (CUDA runtime API
    docs; CUDA Compatibility guide, "Minor Version Compatibility": features that need a newer driver are not
    available): a hang or a paste cut in NCCL's set-up may end so. A possibility, not a reading: a weaker candidate,
    below the transport's readings (most such builds run on the older driver)."""
    found = col.cuda_build_and_driver()   # the pair rules.driver_older_than_build reads
    if found is None:
        return
    build, driver, need, have = found
    if have[0] != need[0] or have >= need:
        return   # another major: rules.driver_older_than_build's reading; the same or newer: nothing to say
    cand("CUDA_DRIVER_TOO_OLD", WEAKEST, f"{where}; NCCL was built for CUDA {build.value['cuda']} and the driver "
         f"supports CUDA {have[0]}.{have[1]} (line {driver.line}): minor-version compatibility runs it, but a call newer "
         "than the driver fails (`API call is not supported in the installed CUDA driver`); decide with: `nvidia-smi` "
         "(driver and its `CUDA Version`), NCCL_DEBUG=WARN <rerun> (the WARN names the failing call)",
         [_ev(driver), _ev(build)])


def _nccl_invalid_argument(col: Collector, cand) -> None:
    """ncclInvalidArgument with no WARN that names its argument: at communicator creation NCCL returns it for a rank
    outside the world (src/init.cc ncclCommInitRank: WARN "Invalid rank requested : %d/%d", v2.4 .. v2.30), which
    RANK_OUT_OF_WORLD_SIZE's signature reads when the WARN is in the log; its `related` names SLURM_NTASKS_MISMATCH
    (srun starting more processes than the world). Dev logs with the bare error: NCCL_LIBRARY_CONFLICT 3 (decided by
    their own lines: a config struct of another NCCL build), SLURM_NTASKS_MISMATCH 1."""
    hits = col.facts.get("nccl_invalid_argument", [])
    if not hits:
        return
    evs = [_ev(hits[0])]
    srun = col.facts.get("srun_exit", [])
    decide = "NCCL_DEBUG=WARN <rerun> (the WARN before the error names the argument)"
    cand("RANK_OUT_OF_WORLD_SIZE", CANDIDATE, "NCCL's `invalid argument` (ncclInvalidArgument) without its WARN: at "
         "communicator creation NCCL answers so to a rank outside 0..world_size-1 (`Invalid rank requested`), when more "
         f"processes start than the world size says; decide with: {decide}, and the RANK / WORLD_SIZE each process "
         "gets", evs)
    if srun:
        cand("SLURM_NTASKS_MISMATCH", CANDIDATE, f"srun ran the tasks (line {srun[0].line}: tasks "
             f"{srun[0].value.get('tasks')} exited): srun starting one process per task while the script sets its own "
             "world size (or a launcher per task) gives ranks past the world; decide with: `--ntasks-per-node` / "
             "`-n` against the world size the script is given", [_ev(srun[0])] + evs)
    cand("NCCL_LIBRARY_CONFLICT", WEAKER, "two NCCL builds in one process (torch's bundled one and another) disagree on "
         f"the structures they pass; decide with: {decide}, `pip list | grep -i nccl` and "
         "`python -c 'import torch; print(torch.cuda.nccl.version())'`", evs)

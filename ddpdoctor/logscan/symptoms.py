"""The differential of the consequences that end most failed jobs (issue 23 §2): an NCCL collective timeout
(torch's watchdog), a watchdog that itself hung (the heartbeat monitor), a worker killed by a signal (torchrun's
`exitcode: -6` / `-11`), a rendezvous that gave up waiting, a Gloo peer that closed its connection, NCCL's
`ncclRemoteError`, a store the client could not route to, and a name lookup of a string that is no host name.

differential.py ranks the specific causes behind NCCL's system error, an OOM, an invalid ordinal and a bare
`Connection refused`; this module does the same for these symptoms, with the same design: each candidate comes with
the evidence that raised it, a low weight (CANDIDATE, below the symptom itself, which stays the headline marked low
confidence or capped by its catalog `ceiling`) and the command that would decide. Nothing here fires when the log
already names its cause (a decisive signature or rule): the ranker then demotes the symptom as usual. A candidate the
log already names (a rule found uneven sequence numbers, say) is not added again.

Which candidates, and their order, come from three places:
* shared/failure-catalog.md §3 ("Signature collisions"): watchdog timeout -> UNEVEN_INPUTS_HANG,
  COLLECTIVE_MISMATCH_ACROSS_RANKS, slow rank-0 work, the network; RendezvousTimeoutError -> RDZV_ID_MISMATCH,
  STANDALONE_WITH_MULTINODE, a node that never started; torchrun exit codes -9 / -7 / 2 / 1;
* the catalog's own `related` lists (NCCL_COLLECTIVE_TIMEOUT: UNEVEN_INPUTS_HANG, COLLECTIVE_MISMATCH_ACROSS_RANKS,
  NCCL_P2P_ACS_IOMMU_HANG; NCCL_WATCHDOG_HUNG: GPU_HARDWARE_FAULT; WORKER_NATIVE_CRASH: NCCL_COLLECTIVE_TIMEOUT;
  GLOO_PEER_EXITED: UNEVEN_INPUTS_HANG; IB_FABRIC_FAULT's fix: "first rule out a peer that died");
* the labels of the dev corpus (tests/corpus, dev split only, 486 logs on 2026-11-26): of 31 logs showing the NCCL
  watchdog timeout, 29 are labelled the timeout itself, 1 IB_FABRIC_FAULT, 1 COLLECTIVE_MISMATCH_ACROSS_RANKS; the
  8 heartbeat-monitor logs: the mode itself or UNKNOWN (alternatives NCCL_COLLECTIVE_TIMEOUT, COLLECTIVE_MISMATCH);
  the 6 native crashes: the mode itself, UNKNOWN, or NCCL_COLLECTIVE_TIMEOUT (a watchdog abort is SIGABRT); the 5
  Gloo peer-closed logs: all the symptom itself. So the symptom stays first and the candidates are alternatives,
  ordered by how often the threads behind the catalog name them.

How the log narrows them: the watchdog's SeqNum (the first collectives, SeqNum <= 2, never carried data: the
transport between GPUs or nodes; later ones did: ranks that diverged); how many hosts wrote lines (one node: the
PCIe peer-to-peer path; several: the network between them); `NET/IB : Using` (the fabric); the signal of a killed
worker (SIGABRT: torch's own abort after an NCCL error or timeout, ProcessGroupNCCL's watchdog; SIGSEGV: a native
library); the store target of `No route to host`.
"""
from __future__ import annotations

import re

from ddpdoctor.catalog.model import CAUSE, CLUE
from ddpdoctor.logscan.calibration import CANDIDATE, WEAKER
from ddpdoctor.logscan.differential import context
from ddpdoctor.logscan.endings import ending_differential, sigbus_alternative
from ddpdoctor.logscan.evidence import Collector, Evidence

DECIDED = 0.5
# the modes whose lines raise a differential here, and the signatures read by name; tests/test_differential_symptoms.py
# checks they exist
SYMPTOMS = ("NCCL_COLLECTIVE_TIMEOUT", "GLOO_COLLECTIVE_TIMEOUT", "NCCL_WATCHDOG_HUNG", "WORKER_NATIVE_CRASH",
            "RDZV_NODES_MISSING", "GLOO_PEER_EXITED", "IB_FABRIC_FAULT", "FIREWALL_BLOCKS_PORTS", "HOSTNAME_UNRESOLVABLE")
SIGNATURES_USED = (("NCCL_COLLECTIVE_TIMEOUT", "NCCL_WATCHDOG"), ("NCCL_COLLECTIVE_TIMEOUT", "WATCHDOG_THREAD_EXCEPTION"),
                   ("RDZV_NODES_MISSING", "RDZV_TIMEOUT"),
                   ("IB_FABRIC_FAULT", "NCCL_REMOTE_ERROR"), ("FIREWALL_BLOCKS_PORTS", "NO_ROUTE_TO_HOST"),
                   ("HOSTNAME_UNRESOLVABLE", "NAME_LOOKUP_FAILED"), ("IB_ROCE_GID_MISMATCH", "GOT_COMPLETION"),
                   ("IB_ROCE_GID_MISMATCH", "GOT_COMPLETION_2"))

FR = ("the flight recorder: TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 <rerun>, then "
      "`ddpdoctor explain --fr <dump dir>` (which rank stopped, in which collective)")


def _evs(col: Collector, fid: str, name: str = "") -> list[Evidence]:
    return col.sig_evidence([fid], name)


def symptom_differential(col: Collector, add, caps, decided: set[str], named) -> None:
    """`decided`: the modes a decisive line or rule already names (then nothing here); `named()`: per mode with
    evidence so far, its combined weight and whether a rule named it (a candidate is not added twice)."""
    _not_a_host_name(col, add, caps)
    _ranks_outnumber_gpus(col, add, named)
    _loopback_store(col, caps)
    _attempt_warnings_only(col, caps)
    sigbus_alternative(col, add, named)   # a signal names no process: even a decided -7 keeps NCCL's reading beside it
    strong = decided or any(st.signature.role == CAUSE and st.signature.weight >= DECIDED
                            for st in col.sigs.values())
    if strong:
        return

    def cand(fid: str, weight: float, note: str, evs: list[Evidence]) -> None:
        have, by_rule = named().get(fid, (0.0, False))
        if by_rule:
            return   # a cross-line rule already reads the log for this mode, with its own note
        # the mode's own signatures may read the very line this candidate comes from (UNEVEN_INPUTS_HANG's weak
        # watchdog signature): one line, two readings; the stronger one counts, not both
        add(fid, 1.0 - (1.0 - weight) / (1.0 - have) if have < weight else 0.0, note, evs)

    hosts = context(col).hosts   # the hosts that wrote lines (differential.py's reading)
    _collective_timeout(col, cand, hosts)
    _watchdog_hung(col, cand)
    _native_signal(col, cand)
    _rendezvous_timeout(col, cand)
    _peer_closed(col, cand)
    _remote_error(col, cand)
    _no_route_to_store(col, cand)
    _retry_exceeded(col, cand)
    ending_differential(col, cand, caps)   # the generic endings: a launcher's summary, `unhandled cuda error`, ... (endings.py)


def _collective_timeout(col: Collector, cand, hosts: set[str]) -> None:
    evs = (_evs(col, "NCCL_COLLECTIVE_TIMEOUT", "NCCL_WATCHDOG") or _evs(col, "NCCL_COLLECTIVE_TIMEOUT")
           or _evs(col, "GLOO_COLLECTIVE_TIMEOUT"))   # the watchdog's own line first: it shows SeqNum and OpType
    if not evs:
        return
    seqs = {int(g["seq"]) for g, _, _ in col.sig_values("NCCL_COLLECTIVE_TIMEOUT") if g.get("seq")}
    first = [evs[0]]
    if len(evs) == len(_evs(col, "NCCL_COLLECTIVE_TIMEOUT", "WATCHDOG_THREAD_EXCEPTION")):
        # only the head of the watchdog thread's C++ backtrace: what it raised is cut off, and besides a timeout it
        # raises the CUDA errors it finds when it queries the collectives' events (ProcessGroupNCCL.cpp
        # WorkNCCL::isCompleted -> checkAndSetException, C10_CUDA_CHECK)
        cand("CUDA_KERNEL_ERROR", CANDIDATE, "the watchdog thread raised, and only its backtrace is in the log: it "
             "also raises a CUDA error it found (an illegal memory access in a kernel); decide with: the line above "
             "the frames (`Process group watchdog thread terminated with exception: ...`), CUDA_LAUNCH_BLOCKING=1 "
             "<rerun>", first)
    multi = len(hosts) >= 2
    if seqs and max(seqs) <= 2:
        # The first collectives of a process group (DDP's parameter broadcast, a barrier) never finished: the ranks
        # never exchanged data, which the code above them cannot cause; the transport did not carry it.
        if multi:
            cand("FIREWALL_BLOCKS_PORTS", CANDIDATE, f"the timeout is in collective #{max(seqs)}, the first data the "
                 f"ranks exchange, on {len(hosts)} hosts: NCCL's own connections between the nodes (other ports than "
                 "the rendezvous) may be blocked; decide with: `ddpdoctor network` on each node, "
                 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET <rerun> (the `NET/Socket : Using` line of each node)", first)
            cand("NCCL_WRONG_INTERFACE_AUTOSELECTED", WEAKER, f"the first collective never completed on "
                 f"{len(hosts)} hosts: NCCL may have picked an interface the nodes do not share; decide with: "
                 "NCCL_SOCKET_IFNAME=<the interface they share> <rerun>", first)
        else:
            cand("NCCL_P2P_ACS_IOMMU_HANG", CANDIDATE, f"the timeout is in collective #{max(seqs)}, the first data "
                 "the GPUs exchange: GPU peer-to-peer transfers that stall (PCIe ACS / IOMMU, consumer GPUs) hang "
                 "exactly there; decide with: NCCL_P2P_DISABLE=1 <rerun> (works => the P2P path), "
                 "`nvidia-smi topo -m`, `sudo lspci -vvv | grep -i acsctl`", first)
            # one host in this log does not mean one node: another node's lines may be elsewhere
            cand("FIREWALL_BLOCKS_PORTS", WEAKER, "if the job spans nodes, the first collective is also the first "
                 "use of NCCL's connections between them, which a firewall may block; decide with: `ddpdoctor "
                 "network` on each node", first)
        return
    late = f" (collective #{min(seqs)}: earlier ones completed)" if seqs else ""
    cand("COLLECTIVE_MISMATCH_ACROSS_RANKS", CANDIDATE, f"a collective timed out{late}: usually one rank took "
         "another code path (a collective under `if rank == 0`, per-rank metric keys, evaluation or checkpointing on "
         f"one rank) or is still busy elsewhere; decide with: TORCH_DISTRIBUTED_DEBUG=DETAIL <rerun>, or {FR}", first)
    cand("UNEVEN_INPUTS_HANG", WEAKER, "one rank may have run out of batches first and left the loop while the "
         "others still wait in the collective; decide with: `len(dataloader)` on every rank (DistributedSampler pads, a "
         "custom sampler may not)", first)
    if multi and "IB" in col.fact_values("nccl_net", "net"):
        cand("IB_FABRIC_FAULT", WEAKER, f"NCCL uses InfiniBand (`NET/IB : Using`) across {len(hosts)} hosts: a link "
             "or HCA that stops passing traffic hangs a collective the same way; decide with: `ibstat` and "
             "`ibqueryerrors`, nccl-tests between the nodes", first)


def _watchdog_hung(col: Collector, cand) -> None:
    evs = _evs(col, "NCCL_WATCHDOG_HUNG")
    if not evs or _evs(col, "NCCL_COLLECTIVE_TIMEOUT"):
        return   # a collective timeout in the log is the story; _collective_timeout lists its causes
    first = [evs[0]]
    cand("NCCL_COLLECTIVE_TIMEOUT", CANDIDATE, "the watchdog thread was itself blocked in an NCCL or CUDA call, most "
         f"often behind a collective that never completed on some rank; decide with: {FR}", first)
    cand("GPU_HARDWARE_FAULT", WEAKER, "a GPU that stopped answering blocks every CUDA call on it; decide with: "
         "`sudo dmesg -T | grep -i xid` and `nvidia-smi` on the node", first)


# torchrun/elastic `exitcode: -N`, `Signal N (SIG...) received by PID`, Open MPI's `Signal: Aborted (6)`
# (opal/util/stacktrace.c), mp.spawn `terminated with signal SIG...`
_SIGNAL = re.compile(r"exitcode: -(\d+)|Signal (\d+) \(|\] Signal: [A-Za-z ]+ \((\d+)\)|terminated with signal SIG([A-Z]+)")
_NAMES = {"ABRT": 6, "SEGV": 11, "ILL": 4, "FPE": 8}


def _native_signal(col: Collector, cand) -> None:
    evs = _evs(col, "WORKER_NATIVE_CRASH")
    if not evs:
        return
    sigs = set()
    for e in evs:
        for m in _SIGNAL.finditer(e.text):
            num = m.group(1) or m.group(2) or m.group(3)
            sigs.add(int(num) if num else _NAMES.get(m.group(4), 0))
    first = [evs[0]]
    if 6 in sigs:
        # ProcessGroupNCCL's watchdog ends the process with std::abort (SIGABRT) after a collective timed out or
        # failed (TORCH_NCCL_ASYNC_ERROR_HANDLING, default since torch 1.12)
        cand("NCCL_COLLECTIVE_TIMEOUT", CANDIDATE, "SIGABRT: torch's NCCL watchdog aborts the process after a "
             "collective timed out or failed; decide with: that rank's own stderr (a `Watchdog caught collective "
             "operation timeout` line above the launcher's summary)", first)
        cand("CUDA_KERNEL_ERROR", WEAKER, "SIGABRT also ends a CUDA error raised in C++ (`terminate called after "
             "throwing`); decide with: CUDA_LAUNCH_BLOCKING=1 <rerun> and that rank's stderr", first)
    if sigs & {11, 4, 8}:
        cand("NCCL_LIBRARY_CONFLICT", WEAKER, "SIGSEGV in a worker without a Python traceback: a native library "
             "crashed; two NCCL/CUDA libraries loaded into one process is a common way; decide with: "
             "PYTHONFAULTHANDLER=1 <rerun> (the Python stack at the crash), `pip list | grep -i nccl`", first)


def _rendezvous_timeout(col: Collector, cand) -> None:
    # torchrun's elastic rendezvous only (RendezvousTimeoutError): a store wait that timed out (`store->get('0') got
    # error: Socket Timeout`, a FileStore key) is another process that never wrote its key, not a rendezvous id
    evs = _evs(col, "RDZV_NODES_MISSING", "RDZV_TIMEOUT")
    if not evs:
        return
    first = [evs[0]]
    ids = col.fact_values("run_id", "id")
    cand("RDZV_ID_MISMATCH", CANDIDATE, "the rendezvous waited for nodes that never joined: nodes started with "
         "different --rdzv-id values (an unset variable, $RANDOM) wait in different rendezvous"
         + (f" (this log shows run id {ids[0]})" if len(ids) == 1 else "") + "; decide with: the `run_id` line of "
         "every node's torchrun output (must be the same)", first)
    cand("RDZV_HOST_NOT_SELF_RECOGNIZED", WEAKER, "nodes missing from a rendezvous may never have got through to "
         "the store (no node hosts it, or one never started); decide with: LOGLEVEL=INFO on the master "
         "(`hosts the TCP store` line) and "
         "`ddpdoctor network --master <master>` from the other nodes", first)


def _peer_closed(col: Collector, cand) -> None:
    evs = _evs(col, "GLOO_PEER_EXITED")
    if not evs:
        return
    first = [evs[0]]
    cand("HOST_OOM_SIGKILL", CANDIDATE, "a Gloo peer closed its connection: it exited; a peer killed by the kernel's "
         "OOM killer leaves no traceback of its own; decide with: `dmesg -T | grep -i -E 'killed process|out of "
         "memory'` on the peer's node, and the first error in the other ranks' logs", first)
    cand("UNEVEN_INPUTS_HANG", WEAKER, "the peer may have finished its loop earlier (fewer batches) and exited while this "
         "rank still waited in a collective; decide with: `len(dataloader)` on every rank", first)


def _remote_error(col: Collector, cand) -> None:
    evs = [e for e in _evs(col, "IB_FABRIC_FAULT", "NCCL_REMOTE_ERROR")]
    if not evs:
        return
    # NCCL's own text names both: "a network error or a remote process exiting prematurely" (nccl.h)
    cand("HOST_OOM_SIGKILL", WEAKER, "ncclRemoteError: a remote process exited or the network failed; a peer "
         "killed by the OOM killer is the common silent exit; decide with: the first error in the other ranks' "
         "logs, `dmesg -T | grep -i oom` on their nodes", [evs[0]])


def _retry_exceeded(col: Collector, cand) -> None:
    """NCCL's `Got completion ... with error 12` is IBV_WC_RETRY_EXC_ERR (ibverbs.h): the peer's HCA never
    acknowledged. On RoCE a wrong GID index does that (the catalog's reading); so does a link, port or switch that
    drops the traffic (IB_FABRIC_FAULT). Dev corpus: of the 5 logs with error 12, 3 are labelled the GID index and 2
    the fabric, and 3 name the other as an alternative."""
    evs = _evs(col, "IB_ROCE_GID_MISMATCH", "GOT_COMPLETION") or _evs(col, "IB_ROCE_GID_MISMATCH", "GOT_COMPLETION_2")
    if evs:
        cand("IB_FABRIC_FAULT", 0.3, "completion error 12 (retry count exceeded): the peer never acknowledged; "
             "besides a wrong GID index on RoCE, a link, port or switch that drops traffic does that; decide with: "
             "`ibv_devinfo` (link_layer: Ethernet = RoCE, then `show_gids`), `ibstat` and `ibqueryerrors` for the "
             "ports of both nodes", evs[:1])


def _no_route_to_store(col: Collector, cand) -> None:
    """`No route to host` (EHOSTUNREACH) from c10d's client socket: an ICMP rejection (firewalld's default REJECT answers
    icmp-host-prohibited) or an address nothing routes to: a wrong or unreachable MASTER_ADDR."""
    evs = [e for e in _evs(col, "FIREWALL_BLOCKS_PORTS", "NO_ROUTE_TO_HOST") if "client socket" in e.text
           or "TCPStore" in e.text or "store" in e.text.lower()]
    if evs:
        cand("RDZV_ENDPOINT_UNREACHABLE", 0.3, "`No route to host` connecting to the store: a REJECT rule answers "
             "so, and so does an address nothing routes to (a wrong MASTER_ADDR or --rdzv-endpoint, another subnet); "
             "decide with: `ip route get <master>` and `ping <master>` from this node, then `ddpdoctor network "
             "--master <master>`", evs[:1])


def _not_a_host_name(col: Collector, add, caps) -> None:
    """A name lookup that failed for a string no resolver can answer (a path, spaces, a scheme): the address given is
    malformed, not a DNS problem (validate.validate_host: RFC 1123 labels of letters, digits, hyphens, underscores)."""
    from ddpdoctor.validate import BadInput, validate_host
    for g, host, rank in col.sig_values("HOSTNAME_UNRESOLVABLE", "NAME_LOOKUP_FAILED"):
        name = (g.get("host") or "").strip()
        if not name or ":" in name:   # IPv6 literals and their scopes: MASTER_ADDR_MALFORMED's own signatures
            continue
        try:
            validate_host(name)
            continue
        except BadInput:
            pass
        evs = [e for e in _evs(col, "HOSTNAME_UNRESOLVABLE", "NAME_LOOKUP_FAILED") if name in e.text][:1]
        add("MASTER_ADDR_MALFORMED", 0.6, f"c10d looked up {name!r}, which is not a host name (a host name has only "
            "letters, digits, hyphens and dots): the master address was built wrong (a path, a variable holding "
            "something else); decide with: `echo $MASTER_ADDR` and the --rdzv-endpoint / init_method of the launch", evs)
        caps.set("HOSTNAME_UNRESOLVABLE", 0.3, f"{name!r} is not a host name: no DNS or /etc/hosts entry would "
                 "resolve it; the address itself is wrong")
        return


def _ranks_outnumber_gpus(col: Collector, add, named) -> None:
    """Two ranks on one GPU (DUPLICATE_GPU_PER_RANK, decided or not) says what happened, not why. Besides a missing
    set_device (that mode's own fix), more processes than the node has GPUs puts two ranks on one GPU whenever the
    script picks its device by wrapping around or takes cuda:0 (pigeonhole): the candidate behind it, with its check.
    Dev corpus: of the 14 logs this mode heads, 2 are labelled NPROC_EXCEEDS_GPUS and 1 more lists it."""
    have = named()
    if "DUPLICATE_GPU_PER_RANK" not in have or "NPROC_EXCEEDS_GPUS" in have:
        return
    evs = col.sig_evidence(["DUPLICATE_GPU_PER_RANK"])[:1]
    add("NPROC_EXCEEDS_GPUS", CANDIDATE, "two ranks on one GPU: besides a missing torch.cuda.set_device(LOCAL_RANK), "
        "more processes per node than it has GPUs put two on one; decide with: `nvidia-smi -L` (and "
        "`echo $CUDA_VISIBLE_DEVICES`) against --nproc-per-node / accelerate's num_processes", evs)


_LOOPBACK = re.compile(r"^(?:127\.\d+\.\d+\.\d+|localhost|::1|::ffff:127\.\d+\.\d+\.\d+)$")


def _loopback_store(col: Collector, caps) -> None:
    """A store connect timeout to a loopback address never crossed a firewall between nodes (the kernel keeps loopback
    traffic on the host; host firewalls accept `lo`): the store was not listening there (rank 0's process on this node
    had not started it, or exited) or the address was meant to be another node's."""
    targets = {(g.get("host") or "").strip() for g, _, _ in col.sig_values("FIREWALL_BLOCKS_PORTS")
               if g.get("host")}
    if targets and all(_LOOPBACK.match(t) for t in targets):
        caps.set("FIREWALL_BLOCKS_PORTS", WEAKER, f"low confidence: the connection went to {sorted(targets)[0]}, a "
                 "loopback address, which never crosses a firewall between nodes; what would decide: whether rank 0's "
                 "process on this node had started its store (`ss -ltnp` on the port while it waits)")


# refused / timed out (Winsock 10061 / 10060): c10d retries the same address until its timeout (the server not
# listening yet), so these repeat for as long as the store does not answer: the failure itself while it lasts
_RETRIED = re.compile(r"(?i)refused|timed out|\b1006[01]\b")
_ATTEMPT_TO = re.compile(r"client socket has failed to connect to \[([^\]]+)\]")


def _attempt_warnings_only(col: Collector, caps) -> None:
    """c10d connects to each address of the store's name in turn (socket.cpp SocketConnectOp::tryConnect) and logs
    every address that fails as a warning, `The client socket has failed to connect to [name]:port (...)`, then
    tries the next one; only when every address failed does it log `... to any network address of (host, port)` and
    raise (strings of libtorch_cpu.so, torch 2.13). A log whose only failure lines are such attempts (Windows' 10049
    for an unusable address of the host's own name is the common one) shows a connection that may well have worked
    with the next address: the mode is possible, not shown."""
    live = [(fid, st) for (fid, _), st in col.sigs.items() if st.signature.role != CLUE]
    if not live or any(n in col.facts for n in ("exception", "traceback", "torchrun_failed", "connect_failed")):
        return
    for _, st in live:
        for e in st.first + ([st.last] if st.last else []):
            m = _ATTEMPT_TO.search(e.text)
            # an address literal (`[::ffff:198.18.0.1]`) resolves to itself alone: no next address to try
            if not m or ":" in m.group(1) or re.fullmatch(r"[0-9.]+", m.group(1)) or _RETRIED.search(e.text):
                return
    for fid in dict.fromkeys(fid for fid, _ in live):
        caps.set(fid, 0.3, "low confidence: only c10d's warnings about single addresses it could not use, after which "
                 "it tries the next address of the name; nothing fails after them in this log (no `failed to connect "
                 "to any network address`, exception or failed worker); what would decide: the job's first error, "
                 "if it failed")

"""A generic symptom is not a final answer (issue 11 §2): for NCCL's `unhandled system error` /
`internal error`, a CUDA out-of-memory error, `invalid device ordinal` and a bare `Connection refused` /
`Connection reset by peer`, rank the specific causes
that the rest of the log supports, each with the evidence that raised it, and say what would decide
between them when the log does not.

Context read from the tallies (facts.py): the call site in torch's frames of the traceback
(communicator creation, a collective, torch.load, .cuda()), the CUDA device and PCI bus of each rank
(NCCL INFO `cudaDev`), the hosts that wrote lines (single vs multi node), the NCCL network in use
(`NET/IB : Using` / `NET/Socket : Using`), /dev/shm's size in a pasted `df`, CUDA_VISIBLE_DEVICES,
NCCL's socket connect failures, and the memory figures of the OOM line itself.

What it returns to the ranker: candidate weights (through the same `add` as the cross-line rules)
and, per symptom, a cap: a symptom whose causes the log does not decide stays the headline, but
with low confidence (UNDECIDED) and a note naming the candidates and the command that would decide.
Nothing here fires when a specific cause signature (role "cause", weight >= DECIDED) already matched:
then the log names its cause and the ranker's usual demotion of the symptom applies.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpdoctor.catalog.model import CAUSE, CLUE
from ddpdoctor.logscan.evidence import Collector, Evidence

DECIDED = 0.5      # a cause signature at least this strong decides the log: no differential
UNDECIDED = 0.4    # the cap of a symptom whose causes the log does not decide (rendered "low confidence")
UNDECIDED_OOM = 0.45  # an OOM is the likeliest reading of its own line, but below "low confidence" when undecided

# Signatures (failure id, name) that are the generic symptoms; tests/test_catalog.py checks they exist.
NCCL_GENERIC = (("NCCL_SYSTEM_ERROR", "NCCL_SYSTEM_ERROR"), ("NCCL_SYSTEM_ERROR", "NCCL_INTERNAL_ERROR"),
                ("NCCL_SYSTEM_ERROR", "ERROR"))
OOM = (("GPU_OUT_OF_MEMORY", "ERROR_CUDA_OUT_OF_MEMORY"), ("GPU_OUT_OF_MEMORY", "CUDA_ERROR_OUT_OF_MEMORY"))
ORDINAL = (("NPROC_EXCEEDS_GPUS", "CUDA_INVALID_ORDINAL"), ("NPROC_EXCEEDS_GPUS", "CUDA_RUNTIME_ERROR_101"))
WSL_MARKERS = (("WSL_NCCL_UNSUPPORTED", "WSL_KERNEL"), ("WSL_NCCL_UNSUPPORTED", "WSL_LIB_PATH"),
               ("WSL_NCCL_UNSUPPORTED", "WSL_MENTIONED"), ("WSL_NCCL_UNSUPPORTED", "VLLM_WSL_DETECTED"))
NCCL_SYSTEM = NCCL_GENERIC[:2]   # without ("NCCL_SYSTEM_ERROR", "ERROR"): ncclRemoteError
IB_PEER = (("IB_ROCE_GID_MISMATCH", "GOT_COMPLETION"), ("IB_ROCE_GID_MISMATCH", "GOT_COMPLETION_2"),
           ("IB_ROCE_GID_MISMATCH", "MODIFY_QP_FAILED"))
SIGNATURES_USED = IB_PEER + NCCL_GENERIC + OOM + ORDINAL + WSL_MARKERS

INIT_SITES = {"init_process_group", "_new_process_group_helper", "barrier", "_store_based_barrier", "new_group",
              "_verify_param_shape_across_processes", "_sync_module_states", "_sync_params_and_buffers", "ddp"}
COLLECTIVE_SITES = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"}

NCCL_DEBUG = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,SHM <rerun> (the NCCL WARN line before the error names it)"
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12}$")   # Docker's default hostname: the container id
_UNIT = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_SIZE = r"(\d+(?:\.\d+)?) ?([KMGT])i?B"


@dataclass
class Caps:
    """Per symptom failure id: the highest confidence it may have, and what to say about it."""
    cap: dict[str, float] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)

    def set(self, fid: str, cap: float, note: str) -> None:
        self.cap[fid] = min(cap, self.cap.get(fid, 1.0))
        self.notes.setdefault(fid, []).append(note)


def _size(num: str, unit: str) -> float:
    return float(num) * _UNIT[unit.upper()]


def _ev(v) -> Evidence:
    return Evidence(v.line, v.text, v.host, v.rank)


@dataclass
class Context:
    hosts: set[str]
    call_sites: list[tuple[int, str, Evidence]]   # (line, site, frame)
    devs: dict[tuple[str | None, str], list]      # (host, device or bus) -> fact values of ranks on it
    net: set[str]
    shm_bytes: float | None
    shm_ev: Evidence | None
    shm_size: str = ""

    def site_before(self, line: int, within: int = 60) -> tuple[str, Evidence] | None:
        """The innermost torch call site of the traceback that ends at (or near) `line`."""
        best = None
        for ln, site, ev in self.call_sites:
            if line - within <= ln <= line and (best is None or ln > best[0]):
                best = (ln, site, ev)
        if best is None:  # the error line printed before its traceback (torchrun's error file, some pastes)
            for ln, site, ev in self.call_sites:
                if line < ln <= line + within and (best is None or ln < best[0]):
                    best = (ln, site, ev)
        return (best[1], best[2]) if best else None


def context(col: Collector) -> Context:
    hosts: set[str] = set()
    for st in col.sigs.values():
        hosts |= {e.host for e in st.first if e.host}
    for vals in col.facts.values():
        hosts |= {v.host for v in vals if v.host}
    sites = []
    for v in col.facts.get("call_site", []):
        site = "ddp" if v.value.get("ddp") else v.value.get("func", "")
        for prefix in ("all_gather", "reduce_scatter"):
            site = prefix if site.startswith(prefix) else site
        sites.append((v.line, site, _ev(v)))
    devs: dict = {}
    for v in col.facts.get("nccl_dev", []):
        key = (v.host, v.value.get("bus") or v.value.get("dev", ""))
        if all(w.value.get("rank") != v.value.get("rank") for w in devs.get(key, [])):
            devs.setdefault(key, []).append(v)
    net = {"NET/" + n for n in col.fact_values("nccl_net", "net")}
    shm = col.facts.get("shm_size", [])
    shm_bytes = shm_ev = None
    if shm:
        m = re.match(r"(\d+(?:\.\d+)?)([KMGT])", shm[0].value.get("size", ""))
        if m:
            shm_bytes, shm_ev = _size(m.group(1), m.group(2)), _ev(shm[0])
    return Context(hosts, sites, devs, net, shm_bytes, shm_ev, shm[0].value.get("size", "") if shm else "")


def _strong_cause(col: Collector, besides: set[str]) -> bool:
    return any(st.signature.role == CAUSE and st.signature.weight >= DECIDED and fid not in besides
               for (fid, _), st in col.sigs.items())


def _hits(col: Collector, sigs) -> list[Evidence]:
    names = set(sigs)
    out = []
    for (fid, _), st in col.sigs.items():
        if (fid, st.signature.name) in names:
            out.extend(st.first)
            if st.last:
                out.append(st.last)
    return sorted(out, key=lambda e: e.line)


def _shared_gpu(ctx: Context) -> tuple[str, list[Evidence]] | None:
    for (host, dev), vals in sorted(ctx.devs.items(), key=lambda kv: str(kv[0])):
        if len(vals) >= 2:
            ranks = ", ".join(v.value.get("rank", "?") for v in vals[:4])
            where = f" on {host}" if host else ""
            return f"NCCL INFO shows ranks {ranks}{where} on one GPU (cudaDev/busId {dev})", [_ev(v) for v in vals[:3]]
    return None


def _guessed_same_gpu(col: Collector) -> tuple[str, list[Evidence]] | None:
    by: dict[tuple[str | None, str], list] = {}
    for v in col.facts.get("barrier_gpu", []):
        vals = by.setdefault((v.host, v.value.get("gpu", "")), [])
        if all(w.value.get("rank") != v.value.get("rank") for w in vals):
            vals.append(v)
    for (host, gpu), vals in by.items():
        if len(vals) >= 2:
            ranks = ", ".join(v.value.get("rank", "?") for v in vals[:4])
            return f"ranks {ranks} each guessed GPU {gpu} for barrier()", [_ev(v) for v in vals[:2]]
    return None


def differential(col: Collector, add, caps: Caps) -> None:
    ctx = None
    # ncclRemoteError ("a remote process exiting or a network error") is not a failed local system call: its
    # candidates are a peer that exited or the fabric (symptoms.py), not /dev/shm or the local interfaces
    if _hits(col, NCCL_SYSTEM) and not _strong_cause(col, {"NCCL_SYSTEM_ERROR"}):
        ctx = context(col)
        _nccl_generic(col, ctx, add, caps)
    if _hits(col, OOM) and not _strong_cause(col, {"GPU_OUT_OF_MEMORY", "GPU0_EXTRA_MEMORY"}):
        _oom(col, ctx or context(col), add, caps)
    if _hits(col, ORDINAL) and not _strong_cause(col, {"NPROC_EXCEEDS_GPUS", "GLOBAL_RANK_USED_AS_DEVICE"}):
        _ordinal(col, ctx or context(col), add, caps)
    # an INFO clue (NCCL's `Using lo` line, weight 0.5) decides nothing: the refused connect still has its readings
    if col.facts.get("conn_error") and not any(st.signature.weight >= DECIDED and st.signature.role != CLUE
                                               for st in col.sigs.values()):
        _connect(col, ctx or context(col), add)


_LOOPBACK_ADDR = re.compile(r"127\.|::1$|::ffff:127\.")
_LINK_LOCAL_ADDR = re.compile(r"169\.254\.|[fF][eE][89abAB][0-9a-fA-F]:|::ffff:169\.254\.")


def _nccl_generic(col: Collector, ctx: Context, add, caps: Caps) -> None:
    err = _hits(col, NCCL_SYSTEM)[0]
    site = ctx.site_before(err.line)
    site_name = site[0] if site else ""
    at_init = site_name in INIT_SITES
    where = f" (raised in {site_name}{', at communicator creation' if at_init else ''})" if site else ""
    decided = False
    shared = _shared_gpu(ctx)
    if shared:
        add("DUPLICATE_GPU_PER_RANK", 0.75, shared[0] + ": NCCL cannot run two ranks on one GPU", shared[1] + [err])
        decided = True
    guessed = _guessed_same_gpu(col) if not decided else None
    if guessed:
        add("DUPLICATE_GPU_PER_RANK", 0.3, guessed[0] + ": set_device was not called; if those ranks see the same "
            "GPUs they share one; decide with: `nvidia-smi` while it starts (several pids on one GPU)", guessed[1])
    conn = col.facts.get("nccl_connect", [])
    # NCCL 2.0-2.3 word a failed socket connect `include/socket.h:185 WARN Call to connect failed : Connection refused`
    # (no address): still a connection between processes that failed, not a shared-memory segment
    refused = [] if conn else [v for v in col.facts.get("conn_error", []) if v.value.get("kind", "").lower() == "refused"]
    if refused:
        # the reading of a refused `Connect to <addr><port> failed` below, weaker: no address says whose socket refused
        add("NCCL_WRONG_INTERFACE_AUTOSELECTED", 0.25, "a connection NCCL opened was refused: the peer listens on "
            "another address (interface chosen by NCCL) or had already exited; decide with: NCCL_DEBUG=INFO (the "
            "`NET/Socket : Using` line of every node), `ddpdoctor network`", [_ev(refused[0]), err])
    if conn:
        v = conn[0]
        why = v.value.get("why", "")
        evs = [_ev(v), err]
        addr = v.value.get("addr", "").strip("[]")
        local = _LOOPBACK_ADDR.match(addr) and len(ctx.hosts) != 1   # one host: lo may be all NCCL had
        if local or _LINK_LOCAL_ADDR.match(addr):
            # the address a peer advertised reaches only its own host (loopback) or its own link (link-local,
            # 169.254/16 and fe80::/10, RFC 3927 / 4291): NCCL picked an interface the nodes do not share
            add("NCCL_WRONG_INTERFACE_AUTOSELECTED", 0.55, f"NCCL's connect to {addr} failed: a "
                f"{'loopback' if local else 'link-local'} address, which a peer on another host cannot reach; NCCL "
                "chose an interface the nodes do not share; decide with: the `NET/Socket : Using` / `Bootstrap : Using` "
                "lines (NCCL_DEBUG=INFO) of each node, then NCCL_SOCKET_IFNAME=<the interface they share>", evs)
        elif "refused" in why.lower():
            add("NCCL_WRONG_INTERFACE_AUTOSELECTED", 0.35, f"NCCL's connect to {v.value.get('addr')} was refused: the "
                "peer listens on another address (interface chosen by NCCL) or had already exited; decide with: "
                "NCCL_DEBUG=INFO (the `NET/Socket : Using` line of every node), `ddpdoctor network`", evs)
        else:
            add("FIREWALL_BLOCKS_PORTS", 0.35, f"NCCL's connect to {v.value.get('addr')}:{v.value.get('port')} failed "
                f"({why.strip()[:60] or 'no reason given'}): the nodes' data ports do not reach each other; decide "
                "with: `ddpdoctor network` on both nodes, NCCL_SOCKET_IFNAME=<interface they share>", evs)
            add("NCCL_WRONG_INTERFACE_AUTOSELECTED", 0.25, "NCCL connected to a peer address that does not answer: "
                "perhaps an interface the nodes do not share; decide with: NCCL_SOCKET_IFNAME=<iface> <rerun>", evs)
    wsl = _hits(col, WSL_MARKERS)
    if wsl:  # a platform where NCCL's shared-memory and P2P paths are limited: the likeliest system error there
        add("WSL_NCCL_UNSUPPORTED", 0.45, f"the job runs under WSL ({wsl[0].text.strip()[:60]}){where}; decide with: "
            "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 <rerun> (works => this), or the job on native Linux", [wsl[0], err])
    multi = len(ctx.hosts) >= 2
    facts = f"{len(ctx.hosts)} hosts in the log ({', '.join(sorted(ctx.hosts)[:3])})" if multi else ""
    small_shm = ctx.shm_bytes is not None and ctx.shm_bytes < 1 << 30
    if small_shm:
        add("NCCL_SHM_TOO_SMALL", 0.55, f"/dev/shm is only {ctx.shm_size} "
            f"(container default 64M); NCCL's shared-memory transport needs more{where}; decide with: "
            "NCCL_SHM_DISABLE=1 <rerun> (works => this)", [ctx.shm_ev, err] if ctx.shm_ev else [err])
        decided = True
    # NCCL's InfiniBand transport failed with a peer (a completion error, a queue pair that did not connect): the
    # system error is what that failure returns; the signatures of those lines name the candidates, not /dev/shm
    ib_peer = [] if decided else _hits(col, IB_PEER)
    if ib_peer:
        caps.set("NCCL_SYSTEM_ERROR", UNDECIDED, f"low confidence: NCCL's InfiniBand transport failed with a peer "
                 f"first (line {ib_peer[0].line}){where}: the system error follows from it")
    elif not decided:
        cands = []
        containers = sorted(h for h in ctx.hosts if _CONTAINER_ID.match(h))
        if not multi and not refused:
            shm_note = ("ranks on one node talk through /dev/shm, the most common system error there" +
                        (f"; host {containers[0]} is named like a Docker container id, and containers get a 64M "
                         "/dev/shm unless started with --shm-size / --ipc=host" if containers else ""))
            cands.append(("NCCL_SHM_TOO_SMALL", 0.25 if containers else 0.21, shm_note + f"{where}; decide with: "
                          "`df -h /dev/shm` (64M in containers: --shm-size / --ipc=host) or NCCL_SHM_DISABLE=1 <rerun>"))
            # the other /dev/shm failure of §3's list (failure-catalog.md): a segment NCCL may not create at all; far
            # rarer than a full one (no dev log carries it), so below it: named in the note, listed only with more
            cands.append(("DEV_SHM_PERMISSION_DENIED", 0.15, f"/dev/shm may not be writable for the job's user{where}; "
                          "decide with: `stat -c '%a' /dev/shm` (1777 expected)"))
        if multi and containers:
            # hosts named like Docker container ids on several nodes: containers on the default bridge network
            # advertise their private 172.17/16 address, which the other host cannot reach (failure-catalog.md §3)
            cands.append(("CONTAINER_BRIDGE_NETWORK", 0.21, f"hosts {', '.join(containers[:2])} are named like Docker "
                          f"container ids{where}: on the default bridge network each advertises an address the other "
                          "host cannot reach; decide with: the `Bootstrap : Using` line of each node (172.17.x.x), "
                          "`docker run --network=host`"))
        if multi:
            cands.append(("FIREWALL_BLOCKS_PORTS", 0.21, f"{facts}{where}: a connection between nodes failed; decide "
                          f"with: {NCCL_DEBUG}, `ddpdoctor network` on each node"))
            cands.append(("NCCL_WRONG_INTERFACE_AUTOSELECTED", 0.15, "multi-node NCCL picks an interface per node; "
                          "decide with: NCCL_DEBUG=INFO (`NET/Socket : Using` on each node), "
                          "NCCL_SOCKET_IFNAME=<iface> <rerun>"))
        elif len(ctx.hosts) <= 1 and not containers:  # nothing says the job is on one node: the network stays possible
            cands.append(("FIREWALL_BLOCKS_PORTS", 0.15, f"if the job spans nodes, a blocked connection{where}; "
                          "decide with: `ddpdoctor network` on each node"))
        if "NET/IB" in ctx.net:
            late = site_name in COLLECTIVE_SITES and not at_init
            cands.append(("IB_FABRIC_FAULT" if late else "IB_MEMLOCK_LIMIT", 0.21,
                          "NCCL uses InfiniBand (`NET/IB : Using`)" + (" and failed in a collective after init"
                                                                        if late else where) +
                          "; decide with: `ulimit -l` (unlimited) and `ibstat` on every node"))
        for fid, w, note in cands:
            add(fid, w, note, [err] + ([site[1]] if site else []))
        names = ", ".join(dict.fromkeys(c[0] for c in cands))
        caps.set("NCCL_SYSTEM_ERROR", UNDECIDED,
                 f"low confidence: NCCL names no cause{where}; candidates from the rest of the log: {names}. "
                 f"What would decide it: {NCCL_DEBUG}")


_TRIED = re.compile(r"Tried to allocate " + _SIZE, re.I)
# c10/cuda/CUDACachingAllocator.cpp's OOM message, by release: "(GPU 0; 11.17 GiB total capacity; ...; 317.11 MiB cached)"
# (<= 1.3), "... reserved in total by PyTorch)" (1.4 - 2.0), "GPU 0 has a total capacty of ..." (2.1, misspelt),
# "... total capacity of ... this process has ... memory in use" (2.2+).
_CAPACITY = re.compile(r"total capaci?ty of " + _SIZE + r"|" + _SIZE + r" total capacity", re.I)
_FREE = re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free", re.I)
_OWN = re.compile(r"this process has " + _SIZE + r" memory in use|" + _SIZE + r" reserved in total by PyTorch|"
                  + _SIZE + r" already allocated; [^;)]{0,40}; [^;)]{0,40} cached\)", re.I)   # <= 1.3: allocated (+ cache)
_OTHERS = re.compile(r"Process \d+ has " + _SIZE + r" memory in use", re.I)
_GPU = re.compile(r"\bGPU (\d+)\b")


def _first_size(rx: re.Pattern, text: str) -> float | None:
    m = rx.search(text)
    if not m:
        return None
    g = [x for x in m.groups() if x is not None]
    return _size(g[0], g[1])


def _oom(col: Collector, ctx: Context, add, caps: Caps) -> None:
    hits = _hits(col, OOM)
    err = hits[0]
    text = err.text
    tried, cap, free, own = (_first_size(rx, text) for rx in (_TRIED, _CAPACITY, _FREE, _OWN))
    others = len(_OTHERS.findall(text))
    gpu = _GPU.search(text)
    site = ctx.site_before(err.line)
    site_name = site[0] if site else ""
    site_ev = [site[1]] if site else []
    ranks = {e.rank for e in hits if e.rank is not None}
    on_gpu0 = [e for e in hits if e.rank and (m := _GPU.search(e.text)) and m.group(1) == "0"]
    if tried and cap and tried >= cap:
        caps.notes.setdefault("GPU_OUT_OF_MEMORY", []).append(
            f"one allocation of {tried / 2**30:.1f} GiB is more than the GPU's {cap / 2**30:.1f} GiB: it cannot fit "
            "whatever else holds memory (a tensor, batch or sequence too large)")
        return
    if cap and own is not None and own >= 0.6 * cap:
        caps.notes.setdefault("GPU_OUT_OF_MEMORY", []).append(
            f"this process itself holds {own / 2**30:.1f} of {cap / 2**30:.1f} GiB: the model, batch or activations "
            "do not fit (not another process)")
        # the OOM line lists the other processes on the GPU as well: with this one holding most of it, they are
        # not what filled it (GPU0_EXTRA_MEMORY's signature reads only that several are there)
        caps.set("GPU0_EXTRA_MEMORY", 0.3, f"low confidence: other processes are on the GPU, but this one holds "
                 f"{own / 2**30:.1f} of its {cap / 2**30:.1f} GiB itself; what would decide: `nvidia-smi` while it runs")
        return
    if cap and free is not None and own is not None and free < 0.05 * cap and own < 0.5 * cap:
        add("GPU0_EXTRA_MEMORY" if gpu and gpu.group(1) == "0" else "DUPLICATE_GPU_PER_RANK", 0.6,
            f"GPU {gpu.group(1) if gpu else '?'} is full ({free / 2**20:.0f} MiB free of {cap / 2**30:.1f} GiB) but "
            f"this process holds only {own / 2**30:.1f} GiB: other processes (other ranks) use its GPU", [err])
        caps.set("GPU_OUT_OF_MEMORY", 0.45, "the memory is held by other processes, not by this one's model")
        return
    if site_name in INIT_SITES or site_name == "load":
        what = "torch.load" if site_name == "load" else f"{site_name} (communicator creation, before training)"
        add("GPU0_EXTRA_MEMORY", 0.55, f"out of memory inside {what}"
            f"{f', allocating only {tried / 2**20:.0f} MiB' if tried else ''}: the job's own tensors are not there "
            "yet; ranks put contexts or a checkpoint on one GPU (set_device / map_location); decide with: "
            "`nvidia-smi` while it starts (one pid on several GPUs, or every rank on GPU 0)", [err] + site_ev)
        caps.set("GPU_OUT_OF_MEMORY", 0.45, f"raised in {site_name}, where the model's memory is not yet in use")
        return
    if on_gpu0 or (others >= 2):
        ev = on_gpu0[:1] or [err]
        why = (f"rank {on_gpu0[0].rank} ran out of memory on GPU 0" if on_gpu0 else
               f"the OOM line lists {others} processes on the GPU")
        add("GPU0_EXTRA_MEMORY", 0.4, why + ": a rank may be allocating on a GPU not its own (or every rank sees "
            "only its GPU as 0); decide with: `nvidia-smi` (one pid on several GPUs)", ev)
        return
    if len(ranks) >= 2 or tried and cap and tried < 0.02 * cap:
        add("GPU0_EXTRA_MEMORY", 0.15, "a distributed job ran out of memory: if rank 0's GPU is fuller than the "
            "others, ranks also allocate on GPU 0; decide with: `nvidia-smi` during the run", [err])
    # the line does not say whose memory filled the GPU: the job's own (the usual case) or other ranks'/processes'
    caps.set("GPU_OUT_OF_MEMORY", UNDECIDED_OOM, "low confidence: the line does not say whose memory filled the GPU; "
             "what would decide between a too-large batch/model and memory held by other ranks: `nvidia-smi` during "
             "the run (memory per GPU and which pids hold it), or torch >= 2.2's OOM line (`this process has ...`)")


def _connect(col: Collector, ctx: Context, add) -> None:
    """A bare `Connection refused` / `Connection reset by peer` that no signature explains: never more than
    a low-confidence list (no catalog mode is the symptom itself), each candidate with what would decide."""
    v = col.facts["conn_error"][0]
    err = _ev(v)
    kind = v.value.get("kind", "").lower()
    target = v.value.get("host", "")
    site = ctx.site_before(v.line)
    site_name = site[0] if site else ""
    evs = [err] + ([site[1]] if site else [])
    text = v.text.lower()
    if kind == "refused":
        if target in ("127.0.0.1", "localhost") and len(ctx.hosts) >= 2:
            add("RDZV_ENDPOINT_UNREACHABLE", 0.3, f"refused at {target} in a job on {len(ctx.hosts)} hosts: the master "
                "address points at each node itself; decide with: `echo $MASTER_ADDR` on every node", evs)
            return
        at = f" (in {site_name})" if site else ""
        add("RDZV_ENDPOINT_UNREACHABLE", 0.3, f"connection refused{at}: nothing listens at the master's address and "
            "port yet (rank 0 not started, already exited, or another address/port); decide with: "
            "`nc -zv <master> <port>` from this node while rank 0 runs, `ddpdoctor network --master <master>`", evs)
        add("FIREWALL_BLOCKS_PORTS", 0.25, "a firewall that rejects (rather than drops) answers with `refused`; "
            "decide with: `ddpdoctor network` on both nodes (ports above 1024 open between them)", evs)
        add("RDZV_STORE_HOST_EXITED", 0.21, "the process hosting the store may have exited before this connect; "
            "decide with: the first error in rank 0's (the master node's) log", evs)
        return
    if "store" in text or "uniqueid" in text:
        add("RDZV_STORE_HOST_EXITED", 0.3, "reset while talking to the store: the process that hosts it (rank 0 or "
            "the master node's agent) went away; decide with: the first error in rank 0's log", evs)
    elif "gloo" in text or "pair.cc" in text:
        add("GLOO_PEER_EXITED", 0.3, "a Gloo peer closed its connection: it exited; decide with: the first error "
            "in the other ranks' logs", evs)
    else:
        add("RDZV_STORE_HOST_EXITED", 0.25, "a peer or the store host reset the connection: it exited or was "
            "killed; decide with: the first error in the other ranks' logs", evs)
    add("HOST_OOM_SIGKILL", 0.21, "a peer killed by the kernel's OOM killer resets its connections; decide with: "
        "`dmesg -T | grep -i -E 'killed process|out of memory'` on the nodes", evs)


def _ordinal(col: Collector, ctx: Context, add, caps: Caps) -> None:
    hits = _hits(col, ORDINAL)
    err = hits[0]
    visible = col.facts.get("cuda_visible", [])
    ranks = sorted({e.rank for e in hits if e.rank is not None})
    summary_rank = col.summary.get("rank") if col.summary else None
    summary_local = col.summary.get("local_rank") if col.summary else None
    if visible:
        n = len(visible[0].value.get("devs", "").split(","))
        nproc = next((int(v.value["nproc"]) for v in visible if v.value.get("nproc")), 0)
        if nproc > n:  # the launch line itself starts more processes than the GPUs it gives them
            add("NPROC_EXCEEDS_GPUS", 0.6, f"CUDA_VISIBLE_DEVICES gives {n} GPU(s) to the {nproc} processes per node "
                "of the same launch line (--nproc_per_node): the extra local ranks ask for devices past them",
                [_ev(next(v for v in visible if v.value.get("nproc"))), err])
            return
        over = [r for r in ranks if r >= n]
        if over:
            add("NPROC_EXCEEDS_GPUS", 0.4, f"CUDA_VISIBLE_DEVICES gives {n} GPU(s) and rank {over[0]} asked for a "
                "device past them", [_ev(visible[0]), err])
            return
    if summary_rank is not None and summary_local is not None and str(summary_rank) != str(summary_local):
        add("GLOBAL_RANK_USED_AS_DEVICE", 0.45, f"torchrun's summary shows global rank {summary_rank} (local rank "
            f"{summary_local}) failing: on a second node the global rank is past the node's GPUs", [err])
        return
    if len(ctx.hosts) >= 2:
        add("GLOBAL_RANK_USED_AS_DEVICE", 0.3, f"{len(ctx.hosts)} hosts in the log: a device chosen by global "
            "rank exists only on the first node; decide with: `grep -n set_device <script>`", [err])
        return
    caps.set("NPROC_EXCEEDS_GPUS", 0.45,
             "low confidence: the log does not say how many GPUs the node has; what would decide it: `nvidia-smi -L` "
             "and `echo $CUDA_VISIBLE_DEVICES` on the node vs --nproc-per-node (more ranks than GPUs), and "
             "`grep -n set_device <script>` (RANK instead of LOCAL_RANK)")

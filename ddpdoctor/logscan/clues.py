"""A partial log's candidates (issue 23): when a failing log names no cause, list the modes its clues point at.

Many logs users post hold a failure but not its cause: the best line is one several modes print (a store connect
timeout, a name lookup error, a rendezvous timeout), or the only line of the cause is a clue that is not an error by
itself (a GeForce card in nccl-tests' device list, WSL's kernel string, a Windows path, `Bootstrap : Using docker0`,
the frames of torch.distributed.launch, which passes `--local-rank`). The ranker gives a clue-only mode at most CLUE_MAX and drops
every mode at or below MIN_CONFIDENCE (a shared line of weight 0.2 alone names nothing), so such logs got no answer
or the generic symptom alone. A person reading them lists the possible causes, the likeliest first, each with the
line that raised it and what would decide. This module does that from catalog data only (no per-log code):

* when: the log shows a failure (Collector.failed: a cause/symptom line, an exception, torchrun's failure, or one of
  the TOLD_FAILURE clue lines, which say in their own words that the job failed), and no
  mode is decided (none of the ranker's `decisive` modes, a cause line of weight >= 0.5 of its own or a rule that
  strong, keeps DECIDED after the rules' caps: c10d's lookup warnings alone are capped, lookup_warning_only). A clean
  log with a GeForce line stays clean; a log that names its cause keeps it alone at the top.
* who: every root-cause mode with a matched CLUE-role signature of weight >= MIN_CLUE, or a symptom line it shares
  with other modes (a pattern of catalog/shared.toml, or a line other modes' signatures match as well), that is not
  listed yet on lines of its own and that no rule or differential (differential.py, symptoms.py) already judged
  (those keep their own weights and notes: this extends them, it does not redo them). The lines of the generic
  symptoms differential.py owns (NCCL system error, OOM, invalid ordinal) are its own: their candidates come from
  the log's context there, not from a base rate here.
* order: by how specific the line is for the mode, its signature's weight divided by the number of modes whose
  signatures match that line (the catalog's `weight` is the author's measure of specificity; a line three modes
  print says a third as much about each), in tiers of 0.1 (catalog weights are set by hand in steps of 0.05-0.1, a
  finer difference is noise); within a tier, by how many dev-split logs of tests/corpus carry the mode as their
  label (DEV_LABELS: the base rate of what users post; held-out labels are never read), then by id.
* how many, how strong: the best MAX_CANDIDATES, in that order, just below the weakest diagnosis the log's own lines
  or rules already list (and at most CLUE_MAX: below render.SHOW_FULL, so weaker alternatives, never a confident
  answer); they fill the list, they never push out what the log itself supports. Clue-only modes past them are
  capped at MIN_CONFIDENCE, so a log with many clue lines lists three, not all.
* each candidate's note: the line that raised it and the command that decides (the mode's `confirm`, else its
  fix's first command: applying the fix and rerunning decides).

Sources: the roles and weights are the catalog's (ddpdoctor/catalog/modes/*.toml, with each signature's emitting code
in its `emitted` provenance); the sibling lists are shared/failure-catalog.md §3 ("Signature collisions") and each
mode's `related`; the base rates are DEV_LABELS below (tests/test_differential_clues.py recomputes them from the
manifest's dev records, so the table cannot drift from the corpus it cites).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from ddpdoctor.catalog.model import CLUE, CONSEQUENCE, SYMPTOM, FailureMode
from ddpdoctor.logscan.calibration import CLUE_ONLY_MAX, MIN_CONFIDENCE
from ddpdoctor.logscan.differential import DECIDED, SIGNATURES_USED
from ddpdoctor.logscan.evidence import Collector, Evidence

CLUE_MAX = CLUE_ONLY_MAX   # the most a clue alone gives a mode (the ranker's cap)
MIN_CLUE = 0.2         # clue signatures below it (a framework frame, `exitcode: 1`, a barrier() frame) are in every
#                        failing log of their kind: handled by user_error.py's rules, never a candidate alone
MAX_CANDIDATES = 3
STEP = 0.02
TIER = 0.1

# Dev-split labels of tests/corpus/manifest.jsonl, batches 1-12, with the consequence-mode relabel of 2026-11-26
# (python -m ddpdoctor.logscan.clues recounts;
# tests/test_differential_clues.py checks the table against the manifest). Modes absent here count 0.
DEV_LABELS_BATCHES = 12
DEV_LABELS = {
    "NCCL_COLLECTIVE_TIMEOUT": 33, "HOST_OOM_SIGKILL": 25, "MASTER_PORT_IN_USE": 25,
    "CUDA_REINIT_IN_FORKED_SUBPROCESS": 17, "DATALOADER_SHM_BUS_ERROR": 17, "DDP_UNUSED_PARAMETERS": 16,
    "SCRIPT_WITHOUT_LAUNCHER": 16, "CUDA_DRIVER_TOO_OLD": 15, "DUPLICATE_GPU_PER_RANK": 14, "GPU_OUT_OF_MEMORY": 14,
    "FABRIC_MANAGER_NOT_RUNNING": 13, "DEFAULT_PG_NOT_INITIALIZED": 12, "NPROC_EXCEEDS_GPUS": 12,
    "RDZV_ENDPOINT_UNREACHABLE": 12, "LAUNCHER_HANGUP_SIGHUP": 11, "LOCAL_RANK_ARG_MISMATCH": 11,
    "NCCL_RELEASE_BUG": 11, "NCCL_SHM_TOO_SMALL": 11, "WINDOWS_NO_NCCL_BACKEND": 11, "HOSTNAME_UNRESOLVABLE": 10,
    "NCCL_SYSTEM_ERROR": 10, "USER_CODE_EXCEPTION": 10, "COLLECTIVE_MISMATCH_ACROSS_RANKS": 9,
    "LAUNCHER_SSH_UNREACHABLE": 9, "NCCL_WATCHDOG_HUNG": 9, "WORKER_NATIVE_CRASH": 9, "CONSUMER_GPU_P2P_BROKEN": 8,
    "CUDA_VISIBLE_DEVICES_HIDES_GPUS": 8, "GLOO_COLLECTIVE_TIMEOUT": 8, "IB_FABRIC_FAULT": 8,
    "NCCL_LIBRARY_CONFLICT": 8, "STORE_BARRIER_WORKER_COUNT_MISMATCH": 8, "GPU_HARDWARE_FAULT": 7,
    "TRAINING_SCRIPT_NOT_FOUND": 7, "WSL_NCCL_UNSUPPORTED": 7, "DATALOADER_OPEN_FILES_LIMIT": 5,
    "GLOO_PEER_EXITED": 5, "NCCL_WRONG_INTERFACE_AUTOSELECTED": 5, "RDZV_STORE_HOST_EXITED": 5,
    "TORCH_BUILD_LACKS_GPU_ARCH": 5, "TORCH_SEES_NO_GPU": 5, "DDP_MODEL_MISMATCH_ACROSS_RANKS": 4,
    "IB_ROCE_GID_MISMATCH": 4, "NCCL_SOCKET_IFNAME_NOT_FOUND": 4, "CUDA_KERNEL_ERROR": 3, "GPU0_EXTRA_MEMORY": 3,
    "IB_DEVICE_NOT_VISIBLE": 3, "IPV6_ADDRESS_FAMILY": 3, "K8S_DNS_NOT_READY": 3, "MASTER_ADDR_MALFORMED": 3,
    "RDZV_NODES_MISSING": 3, "SLURM_NTASKS_MISMATCH": 3, "WINDOWS_LIBUV_UNSUPPORTED": 3, "IB_MEMLOCK_LIMIT": 2,
    "LAUNCHER_NOT_ON_PATH": 2, "NCCL_ENV_MISMATCH_ACROSS_NODES": 2, "TRAINING_FRAMEWORK_EXCEPTION": 2,
    "FIREWALL_BLOCKS_PORTS": 1, "GLOO_ADDRESS_UNREACHABLE": 1, "GLOO_SOCKET_IFNAME_INVALID": 1,
    "IB_CROSS_RAIL_UNREACHABLE": 1, "MPI_NOT_ENOUGH_SLOTS": 1, "MTU_MISMATCH": 1, "NCCL_P2P_ACS_IOMMU_HANG": 1,
    "NCCL_VERSION_MISMATCH_ACROSS_NODES": 1, "RANK_OUT_OF_WORLD_SIZE": 1, "RDZV_ID_MISMATCH": 1,
    "VGPU_UVM_DISABLED": 1, "WINDOWS_HOSTS_FILE_REVERSE_NAME": 1, "ZMQ_PORT_COLLISION": 1,
}


@dataclass(frozen=True)
class Candidate:
    failure: str
    specificity: float     # signature weight / modes whose signatures match its line
    line: Evidence
    signature: str
    shared_with: tuple[str, ...]   # the other modes whose signatures match that line


def _decide(fm: FailureMode) -> str:
    if fm.confirm:
        return fm.confirm
    return fm.fix.commands[0] if fm.fix.commands else f"ddpdoctor explain {fm.id}"


_OWNED: dict[int, frozenset[str]] = {}


def _owned(catalog: dict[str, FailureMode]) -> frozenset[str]:
    """The patterns of the generic symptoms differential.py owns (NCCL system error, OOM, invalid ordinal): it
    lists their candidates from the log's context (hosts, call site, /dev/shm, NET/IB), better than a base rate."""
    key = id(catalog)
    if key not in _OWNED:
        names = set(SIGNATURES_USED)
        _OWNED.clear()
        _OWNED[key] = frozenset(s.pattern for fid, fm in catalog.items() for s in fm.signatures
                                if (fid, s.name) in names)
    return _OWNED[key]


def candidates(col: Collector, catalog: dict[str, FailureMode], explained: set,
               judged: Callable[[str], bool]) -> list[Candidate]:
    """Every mode a clue or shared line of this log points at, the likeliest first (see the module doc).
    `judged(fid)`: a rule or differential already weighed that mode (it keeps its own weight)."""
    owned = _owned(catalog)
    on_line: dict[int, set[str]] = {}
    for key, st in col.sigs.items():
        if key in explained:
            continue
        for e in st.first + ([st.last] if st.last else []):
            on_line.setdefault(e.line, set()).add(key[0])
    best: dict[str, Candidate] = {}
    for key, st in col.sigs.items():
        fid, s = key[0], st.signature
        fm = catalog.get(fid)
        if key in explained or fm is None or fm.kind == CONSEQUENCE or judged(fid):
            continue
        for e in st.first + ([st.last] if st.last else []):
            others = tuple(sorted(on_line.get(e.line, set()) - {fid}))
            if s.role == CLUE:
                if s.weight < MIN_CLUE:
                    continue
            elif not (s.role == SYMPTOM and (s.shared or others)) or s.pattern in owned:
                continue   # a cause line, a symptom of this mode alone (the ranker's own weights judge them), or a
                #            symptom whose siblings differential.py weighs from the rest of the log
            c = Candidate(fid, s.weight / (1 + len(others)), e, s.name, others)
            if fid not in best or c.specificity > best[fid].specificity:
                best[fid] = c
    return sorted(best.values(), key=lambda c: (-int(c.specificity / TIER + 1e-9), -DEV_LABELS.get(c.failure, 0),
                                                 -c.specificity, c.failure))


# Clue lines that are no error line, yet say that the job failed: a log holding one of them failed, although no cause or
# symptom line is in it (a hang prints none; a poster cuts the error off). Each is still a clue (it raises its mode as
# a possibility, never more); it only opens the candidate list that a log without any failure line does not get.
# tests/test_explain_clues25.py checks that each names a clue signature of the catalog.
# * argparse's usage line naming --local_rank / --local-rank: CPython Lib/argparse.py ArgumentParser.error prints
#   print_usage(stderr) and then `%(prog)s: error: %(message)s` and exits 2 (3.2 .. 3.13); a launched script prints
#   its usage on a bad command line only (nobody posts `-h`), and the argument the launcher adds is the local rank.
# * a poster's sentence that NCCL_P2P_DISABLE=1 (or P2P disabled) makes the job work: it did not work before.
# * the second line of Lightning's MisconfigurationException (`But your machine only has: []`): raised, though its
#   class name is no `...Error` the exception fact reads.
TOLD_FAILURE = (("LOCAL_RANK_ARG_MISMATCH", "ARGPARSE_USAGE_LOCAL_RANK"),
                ("NCCL_P2P_ACS_IOMMU_HANG", "WORKS_WITH_P2P_DISABLED"),
                ("CONSUMER_GPU_P2P_BROKEN", "WORKS_WITH_P2P_DISABLED"),
                ("CUDA_VISIBLE_DEVICES_HIDES_GPUS", "LIGHTNING_MACHINE_HAS_NO_GPU"),
                ("TORCH_SEES_NO_GPU", "LIGHTNING_MACHINE_HAS_NO_GPU"))


def told_failure(col: Collector) -> bool:
    """The log holds a TOLD_FAILURE line: it failed, whatever else it shows."""
    return any((fid, st.signature.name) in TOLD_FAILURE for (fid, _), st in col.sigs.items())


def clue_candidates(col: Collector, catalog: dict[str, FailureMode], decisive: set[str], explained: set,
                    scores: Callable[[], dict[str, tuple[float, bool]]], add, caps, failed: bool) -> None:
    """The ranker's hook: lift a failing, undecided log's best candidates to listed weaker alternatives.
    `scores()`: per mode its combined weight so far and whether a rule added to it (ranker.diagnose). `failed`: the
    log shows a failure (Collector.failed or a TOLD_FAILURE line: the ranker asks once and passes it)."""
    # a decisive line that a rule capped below DECIDED (a Windows lookup warning alone, lookup_warning_only) no longer
    # names the cause
    if not failed or any(caps.cap.get(fid, 1.0) >= DECIDED for fid in decisive):
        return
    now = scores()
    clue_only = {fid for fid in now if all(st.signature.role == CLUE for (f, _), st in col.sigs.items() if f == fid)}

    def judged(fid: str) -> bool:   # a rule weighed it, or lines of its own already list it: it keeps its weight
        score, ruled = now.get(fid, (0.0, False))
        return ruled or (fid not in clue_only and score > MIN_CONFIDENCE)
    found = candidates(col, catalog, explained, judged)
    # below every diagnosis the log's own lines or rules already list (they are the better-founded readings)
    listed = [score for fid, (score, _) in now.items() if judged(fid) and MIN_CONFIDENCE < score]
    top = min([CLUE_MAX, *listed])
    for i, c in enumerate(found):
        fm = catalog[c.failure]
        if i >= MAX_CANDIDATES:
            if now.get(c.failure, (0.0, False))[0] > MIN_CONFIDENCE:   # a clue-only mode past the best: not listed
                caps.cap[c.failure] = min(MIN_CONFIDENCE, caps.cap.get(c.failure, 1.0))
            continue
        conf = max(top - STEP * (i + 1), MIN_CONFIDENCE + 0.001 * (MAX_CANDIDATES - i))
        sig = next((s for s in fm.signatures if s.name == c.signature), None)
        what = c.line.note or (sig.note if sig is not None and sig.note and "{" not in sig.note else c.signature)
        verb = "matches" if len(c.shared_with[:3]) == 1 else "match"
        also = f"; {' and '.join(c.shared_with[:3])} {verb} that line too" if c.shared_with else ""
        add(c.failure, conf, f"low confidence: a possible cause, not a decided one: line {c.line.line} ({what}{also}) "
            f"points at it, and nothing in the log names a cause; decide with: {_decide(fm)}", [c.line])
        caps.cap[c.failure] = min(conf, caps.cap.get(c.failure, 1.0))


def dev_label_counts(manifest_lines, batches: int = DEV_LABELS_BATCHES) -> dict[str, int]:
    """DEV_LABELS recounted from manifest.jsonl's lines: dev records of batches 1..`batches` (a batch added later
    changes the table only when this module's DEV_LABELS_BATCHES moves with it)."""
    out: dict[str, int] = {}
    for line in manifest_lines:
        if not line.strip():
            continue
        r = json.loads(line)
        if r["split"] == "dev" and r.get("batch", 1) <= batches and r["label"] != "UNKNOWN" and not r.get("proposed"):
            out[r["label"]] = out.get(r["label"], 0) + 1
    return out


if __name__ == "__main__":   # recount DEV_LABELS from the corpus (dev records only)
    import pathlib
    manifest = pathlib.Path(__file__).resolve().parents[2] / "tests" / "corpus" / "manifest.jsonl"
    counts = dev_label_counts(manifest.read_text().splitlines())
    print({k: v for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))})

"""Lightning's per-process `GLOBAL_RANK: r, MEMBER: m/N` lines, read across lines (a cross-line rule, as rules.py).

Every Lightning process prints `Initializing distributed: GLOBAL_RANK: r, MEMBER: r+1/N` as it joins the process group
(src/lightning/fabric/utilities/distributed.py _init_dist_connection; `initializing ddp: ...` before 1.5): each rank
once. When a node runs fewer Slurm tasks than Trainer(devices) asks for, Lightning does not take the job as managed by
Slurm (its SLURM environment wants one task per device) and starts the missing processes itself on every node, where
nothing sets a node rank (NODE_RANK defaults to 0): every node's processes take the same global ranks, the same rank
is printed twice while the highest ranks never are, and the job hangs waiting for them (Lightning-AI/pytorch-lightning
#6206, #4389). A rank printed twice with every member up to N present is a log printed twice (two handlers, a pasted
copy), not this: the rule wants both. Two runs pasted one after the other show the same shape, hence a rule below
DECISIVE that says what would decide.
"""
from __future__ import annotations

from ddpdoctor.logscan.evidence import KEEP_VALUES, Collector

MODE, NAME = "SLURM_NTASKS_MISMATCH", "LIGHTNING_MEMBER"
SIGNATURES_USED = ((MODE, NAME),)


def duplicate_members(col: Collector, add) -> None:
    for (fid, _), st in col.sigs.items():
        if fid == MODE and st.signature.name == NAME:
            break
    else:
        return
    if len(st.values) >= KEEP_VALUES:
        return   # values no longer kept: the distinct ranks are unknown
    ranks = {groups["rank"] for groups, _host, _rank in st.values}
    worlds = {groups["world"] for groups, _host, _rank in st.values}
    if len(worlds) != 1:
        return   # several runs of different sizes in one paste
    world = int(next(iter(worlds)))
    # each process prints its line once: more lines than distinct ranks is a rank printed twice (whatever the host or
    # rank prefix); all N ranks present is the whole log printed twice
    if st.count <= len(ranks) or len(ranks) >= world:
        return
    add(MODE, 0.45, f"low confidence: {st.count} processes announced only {len(ranks)} distinct global ranks of "
        f"{world} (a rank printed twice, {world - len(ranks)} never): each node started fewer Slurm tasks than "
        "Lightning's devices; what would decide: `echo $SLURM_NTASKS_PER_NODE` in the job against Trainer(devices=...)",
        st.first[:3])

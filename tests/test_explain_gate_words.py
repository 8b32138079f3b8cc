"""Gate words past 64 (issue 23) and the three signatures that waited on them: Lightning's MEMBER lines read across
lines (a rank printed twice), vLLM's WSL warning, NCCL's graph line with a PCIe path between the GPUs."""
import pytest
from logtext import by_id, explain, ids

from ddpdoctor.logscan import default_matcher, gatefind

FABRIC = "Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {m}/{n}"   # lightning/fabric/utilities/distributed.py
OLD = "initializing ddp: GLOBAL_RANK: {r}, MEMBER: {m}/{n}"             # pytorch_lightning 0.8 .. 1.4


def members(template, ranks, world, prefix=""):
    return [prefix.format(i=i) + template.format(r=r, m=r + 1, n=world) for i, r in enumerate(ranks)]


@pytest.mark.parametrize("n", [1, 63, 64, 65, 67, 128, 129, 200])
def test_gates_are_dealt_into_the_fewest_even_groups_that_keep_teddy(n):
    words = [f"w{i:04d}".encode() for i in range(n)]
    parts = gatefind.groups(words)
    sizes = [len(p) for p in parts]
    assert len(parts) == -(-n // gatefind.TEDDY_MAX)
    assert max(sizes) <= gatefind.TEDDY_MAX and max(sizes) - min(sizes) <= 1
    assert sorted(w for p in parts for w in p) == words


def test_the_new_triggers_are_gates_of_their_own_and_found():
    m = default_matcher()
    for gate in (b"global_rank: ", b"as wsl is detected", b"crossnic "):
        assert gate in m.gates, gate
    assert len(m._gate_list) > gatefind.TEDDY_MAX   # past one automaton: the split pass finds them (below)
    line = b"x\n" + FABRIC.format(r=0, m=1, n=2).lower().encode() + b"\nrank 1 timed out\n"
    if m._ac is not None:
        assert sorted(m._ac_gate_hits(line)) == sorted(m._gate_hits(line, m._gate_list))


@pytest.mark.parametrize("template", [FABRIC, OLD])
def test_a_rank_printed_twice_and_ranks_never_printed_point_at_the_slurm_task_layout(template):
    # two nodes, one task each too few: both nodes' processes take ranks 0 and 1 of 4 (pytorch-lightning#6206)
    ex = explain(members(template, [0, 1, 0, 1], 4))
    assert ids(ex)[0] == "SLURM_NTASKS_MISMATCH"
    d = by_id(ex, "SLURM_NTASKS_MISMATCH")
    assert 0.35 <= d.confidence < 0.5   # shown, but marked low confidence: two pasted runs look the same
    assert any("2 distinct global ranks of 4" in n for n in d.notes)


def test_duplicates_from_different_hosts_count_too():
    ex = explain(members(FABRIC, [0, 1, 0, 1], 4, prefix="[node{i}]: "))
    assert ids(ex)[:1] == ["SLURM_NTASKS_MISMATCH"]


def test_each_rank_once_is_a_healthy_start_whatever_part_of_the_job_the_log_shows():
    assert "SLURM_NTASKS_MISMATCH" not in ids(explain(members(FABRIC, [0, 1, 2, 3], 4)))
    assert "SLURM_NTASKS_MISMATCH" not in ids(explain(members(FABRIC, [0, 1, 2, 3], 8)))   # node 0's log of two


def test_a_log_printed_twice_whole_is_not_a_task_mismatch():
    lines = members(FABRIC, [0, 1], 2)
    assert "SLURM_NTASKS_MISMATCH" not in ids(explain(lines + lines))


def test_two_runs_of_different_sizes_in_one_paste_decide_nothing():
    assert "SLURM_NTASKS_MISMATCH" not in ids(explain(members(FABRIC, [0, 0], 2) + members(FABRIC, [0], 4)))


NCCL_SYSTEM = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
VLLM_WSL = ("WARNING 03-11 09:14:05 [interface.py:304] Using 'pin_memory=False' as WSL is detected. "
            "This may slow down the performance.")


def test_vllms_wsl_warning_names_wsl_as_the_likeliest_nccl_system_error():
    assert ids(explain([VLLM_WSL, NCCL_SYSTEM]))[0] == "WSL_NCCL_UNSUPPORTED"
    assert "WSL_NCCL_UNSUPPORTED" not in ids(explain([NCCL_SYSTEM]))


def test_vllms_wsl_warning_alone_is_no_diagnosis():
    assert ids(explain(["INFO 03-11 09:14:02 [__init__.py:239] Automatically detected platform cuda.", VLLM_WSL])) == []


GRAPH = "ws:1:2 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 24.000000/24.000000, type {t}/PIX, sameChannels 1"
HANG = ("[rank0]:[E311 10:44:05.123456789 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 "
        "milliseconds before timing out.")


@pytest.mark.parametrize("path,shown", [("PXB", True), ("SYS", True), ("NVL", False)])
def test_ncclS_graph_line_shows_a_pcie_path_between_the_gpus_as_evidence_of_the_p2p_mode(path, shown):
    ex = explain(["GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)", GRAPH.format(t=path), HANG])
    d = by_id(ex, "CONSUMER_GPU_P2P_BROKEN")
    assert any("crossNic" in e.text for e in d.evidence) is shown


def test_ncclS_graph_line_alone_is_no_diagnosis():
    assert ids(explain([GRAPH.format(t="PXB")])) == []

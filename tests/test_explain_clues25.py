"""Clue lines that say the job failed, and the candidates they open (issue 23 §2, ddpdoctor/logscan/clues.py
TOLD_FAILURE; endings.py's driver a CUDA minor behind). A partial log whose only telling line is a clue -- the
poster's sentence that NCCL_P2P_DISABLE=1 makes it work, argparse's usage line naming the script's --local_rank, a
driver older than NCCL's build -- lists the modes it points at as possibilities (below SHOW_FULL, each with what
decides), never as a named answer; the same words in a healthy log (NCCL's own `P2P is disabled` INFO line, a
command line that sets the variable) give nothing. The lines are the wording of real pastes (tests/corpus/dev) and of
the code that prints them (the catalog's `emitted` templates)."""
from ddpdoctor import catalog
from ddpdoctor.logscan import clues
from ddpdoctor.logscan.render import SHOW_FULL, render_text
from logtext import by_id, explain, ids

TOPO = ["\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity",
        "GPU0\t X \tPHB\t0-13\t0",
        "GPU1\tPHB\t X \t0-13\t0",
        "all_reduce_perf hangs after Init COMPLETE on this box."]
P2P_WORDINGS = [
    "Setting NCCL_P2P_DISABLE=1 did workaround but got really low speed.",
    "Setting `NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1` (forcing socket transport) resolves the deadlock completely.",
    "The same smoke test succeeds immediately when direct GPU P2P is disabled with:",
    "If p2p disabled, things all going well.",
]
P2P_MODES = {"CONSUMER_GPU_P2P_BROKEN", "NCCL_P2P_ACS_IOMMU_HANG"}
LAUNCH_WARNING = [
    "/usr/lib/python3.8/site-packages/torch/distributed/launch.py:181: FutureWarning: The module "
    "torch.distributed.launch is deprecated",
    "and will be removed in future. Use torchrun.",
    "If your script expects `--local-rank` argument to be set, please",
    "change it to read from `os.environ['LOCAL_RANK']` instead.",
]
USAGE = "usage: gpt2_ft.py [-h] [--platform PLATFORM] [--local_rank LOCAL_RANK] [--rank RANK] [--device DEVICE]"


def test_every_told_failure_line_is_a_clue_signature_of_the_catalog():
    sigs = {(fid, s.name): s for fid, fm in catalog.failures().items() for s in fm.signatures}
    for key in clues.TOLD_FAILURE:
        assert key in sigs and sigs[key].role == "clue", key


def test_a_poster_saying_p2p_off_makes_it_work_lists_both_p2p_modes_as_possibilities():
    for sentence in P2P_WORDINGS:
        ex = explain(TOPO + [sentence])
        assert set(ids(ex)[:2]) == P2P_MODES, (sentence, ids(ex))
        assert all(d.confidence < SHOW_FULL for d in ex.diagnoses), [(d.failure.id, d.confidence) for d in ex.diagnoses]
        d = ex.diagnoses[0]
        assert any("possible cause" in n and "decide with: " in n for n in d.notes), d.notes
        text = render_text(ex)
        assert "No line in this log points clearly at a cause; possible:" in text and "candidate: " in text


def test_the_same_words_that_do_not_say_it_works_give_nothing():
    healthy = ["node1:936:936 [0] NCCL INFO P2P is disabled between connected GPUs 2 and 3. You can repress this "
               "message with NCCL_IGNORE_DISABLED_P2P=1.",
               "node1:936:936 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
               "**NCCL_P2P_DISABLE=1** NCCL_DEBUG=INFO ./all_reduce_perf -b 8 -e 2G -g 2",
               "NCCL_P2P_DISABLE=1 doesn't help, it still hangs.",
               "NCCL_P2P_DISABLE=1 did not work either."]
    assert ids(explain(TOPO + healthy)) == []


def test_a_gpu_peer_line_of_its_own_still_decides():
    # CUDA's own refusal of peer access names the consumer-card reading; the sentence only adds to it
    ex = explain(["RuntimeError: CUDA error: peer access is not supported between these two devices", P2P_WORDINGS[0]])
    assert ids(ex)[0] == "CONSUMER_GPU_P2P_BROKEN" and ex.diagnoses[0].confidence >= SHOW_FULL


def test_argparse_usage_naming_local_rank_cut_before_its_error_is_a_possibility():
    ex = explain(LAUNCH_WARNING + ["", USAGE])
    assert ids(ex) == ["LOCAL_RANK_ARG_MISMATCH"]
    d = by_id(ex, "LOCAL_RANK_ARG_MISMATCH")
    assert d.confidence < SHOW_FULL and [e.line for e in d.evidence] == [6]
    # the error line argparse prints next decides, as it did before
    ex = explain(LAUNCH_WARNING + [USAGE, "gpt2_ft.py: error: unrecognized arguments: --local-rank=0"])
    assert ids(ex)[0] == "LOCAL_RANK_ARG_MISMATCH" and ex.diagnoses[0].confidence >= 0.5


def test_a_usage_line_without_the_local_rank_option_says_nothing():
    assert ids(explain(LAUNCH_WARNING + ["usage: train.py [-h] [--data DATA] [--epochs EPOCHS]"])) == []
    # the option in a help listing (no brackets) is not argparse's usage line
    assert ids(explain(["  --local_rank LOCAL_RANK  local rank for distributed training"])) == []


SETUP = ["pod-0:205826:205826 [0] NCCL INFO Bootstrap : Using eth0:10.221.109.254<0>",
         "pod-0:205826:205826 [0] NCCL INFO cudaDriverVersion {driver}",
         "NCCL version 2.14.3+cuda11.7",
         "pod-0:205826:205907 [0] NCCL INFO NET/Socket : Using [0]eth0:10.221.109.254<0>"]


def setup(driver):
    return [ln.replace("{driver}", str(driver)) for ln in SETUP]


def test_a_driver_a_cuda_minor_behind_the_build_is_the_weakest_candidate_of_a_log_stopping_in_set_up():
    ex = explain(setup(11000))
    assert ids(ex)[-1] == "CUDA_DRIVER_TOO_OLD", ids(ex)   # after the transport's readings (P2P, NET/Socket only)
    d = by_id(ex, "CUDA_DRIVER_TOO_OLD")
    assert d.confidence < min(x.confidence for x in ex.diagnoses if x is not d) and d.confidence < SHOW_FULL
    assert "supports CUDA 11.0" in d.notes[0] and "11.7" in d.notes[0]
    # the same minor, or a newer driver: not a candidate
    assert "CUDA_DRIVER_TOO_OLD" not in ids(explain(setup(11070)))
    assert "CUDA_DRIVER_TOO_OLD" not in ids(explain(setup(12020)))
    # the job went on past its set-up: a healthy start, nothing at all
    assert ids(explain(setup(11000) + ["step 10 loss 2.31", "step 20 loss 2.02"])) == []


COULDNT_STAT = "[1,3]<stderr>:libibverbs: Warning: couldn't stat '/sys/class/infiniband/mlx5_13'."


def test_libibverbs_skipping_an_rdma_device_is_a_candidate_of_a_failing_log_only():
    failing = [COULDNT_STAT, "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error, "
                             "NCCL version 2.10.3", "Traceback (most recent call last):"]
    ex = explain(failing)
    assert "IB_DEVICE_NOT_VISIBLE" in ids(ex), ids(ex)   # after the NCCL system error's own differential
    assert by_id(ex, "IB_DEVICE_NOT_VISIBLE").confidence < SHOW_FULL
    # the warning in a healthy log (the job runs on sockets) is no diagnosis
    assert ids(explain([COULDNT_STAT, "epoch 1: loss 0.31", "Training finished."])) == []


def test_a_reading_that_only_clue_lines_raise_is_calibrated_apart_from_a_failure_lines_reading():
    # calibration.py counts per (first mode, basis): the poster's sentence is a clue reading (basis CLUE); CUDA's
    # `peer mapping resources exhausted` under NCCL's unhandled cuda error is a failure line's reading (endings.py)
    from ddpdoctor.logscan import calibration
    ex = explain(TOPO + [P2P_WORDINGS[1]])
    assert {d.basis for d in ex.diagnoses if d.failure.id in P2P_MODES} == {calibration.CLUE}
    peer = explain(["node1:1:1 [0] transport.cc:154 NCCL WARN Cuda failure 'peer mapping resources exhausted'",
                    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled cuda error, NCCL version 2.10.3"])
    assert by_id(peer, "CONSUMER_GPU_P2P_BROKEN").basis != calibration.CLUE

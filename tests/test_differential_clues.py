"""A partial log (issue 23, ddpdoctor/logscan/clues.py): a failing log that names no cause lists the modes its clue
lines and shared lines point at, as weaker candidates (never a confident answer), the most specific and most reported
first, at most three, each with the line that raised it and the command that decides. A clean log with the same clue
lines stays clean, and a log that names its cause keeps it alone. The lines are the wording of real pastes
(tests/corpus/dev) and of the code that prints them (the catalog's `emitted` templates)."""
import io
from pathlib import Path

from ddpdoctor import catalog
from ddpdoctor.logscan import clues, default_matcher
from ddpdoctor.logscan.evidence import Collector
from ddpdoctor.logscan.matcher import ScanStats
from ddpdoctor.logscan.render import SHOW_FULL, render_text
from logtext import explain, ids, by_id

TORCHRUN_EXIT_1 = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 4211) "
                   "of binary: /usr/bin/python3")
GEFORCE_3090 = "#  Rank  0 Group  0 Pid   9822 on node1 device  0 [0000:2c:00] NVIDIA GeForce RTX 3090"
WSL_KERNEL = "Linux DESKTOP-4K2J9QX 5.15.133.1-microsoft-standard-WSL2 #1 SMP Thu Oct 5 21:02:42 UTC 2023 x86_64 GNU/Linux"
WINDOWS_10049 = (r"[W ..\torch\csrc\distributed\c10d\socket.cpp:601] [c10d] The client socket has failed to connect to "
                 r"[comp]:4223 (system error: 10049 - The requested address is not valid in its context.).")
LEGACY_LAUNCHER = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.8/dist-packages/torch/distributed/launch.py", line 193, in main',
    "    launch(args)",
    '  File "/usr/local/lib/python3.8/dist-packages/torch/distributed/run.py", line 892, in run',
    "    elastic_launch(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "train.py FAILED",
]


def assert_candidate(ex, fid, line):
    """Listed, weaker than a full answer, backed by `line`, and saying what decides (the mode's own command)."""
    d = by_id(ex, fid)
    assert d.confidence < SHOW_FULL, (fid, d.confidence)
    assert [e.line for e in d.evidence] == [line], (fid, d.evidence)
    fm = catalog.failures()[fid]
    decide = fm.confirm or fm.fix.commands[0]
    assert any("possible cause" in n and "decide with: " + decide in n for n in d.notes), (fid, d.notes)


def test_a_clean_log_with_a_geforce_line_stays_clean():
    ex = explain([GEFORCE_3090, "#  Rank  1 Group  0 Pid   9822 on node1 device  1 [0000:2d:00] NVIDIA GeForce RTX 4090",
                  "node1:9822:9822 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>", WSL_KERNEL,
                  "# Avg bus bandwidth    : 20.1"])
    assert ex.diagnoses == []


def assert_after_the_logs_own_readings(ex, fid):
    """A candidate fills the list below what the log's own lines and rules support (endings.py's reading of an exit
    code 1 without its traceback, here), never above them."""
    d = by_id(ex, fid)
    own = [e for e in ex.diagnoses if not any("possible cause" in n for n in e.notes)]
    assert all(e.confidence > d.confidence for e in own), [(e.failure.id, e.confidence) for e in ex.diagnoses]
    assert fid in ids(ex)[:3], ids(ex)


def test_a_failing_log_with_only_a_geforce_card_lists_consumer_p2p():
    ex = explain([GEFORCE_3090, TORCHRUN_EXIT_1])
    assert_candidate(ex, "CONSUMER_GPU_P2P_BROKEN", 1)
    assert_after_the_logs_own_readings(ex, "CONSUMER_GPU_P2P_BROKEN")


def collect(lines):
    col = Collector()
    for lm in default_matcher().scan(io.BytesIO(("\n".join(lines) + "\n").encode()), ScanStats(),
                                     saturated=col.saturated):
        col.add(lm)
    return col


def test_the_more_specific_clue_goes_first():
    # WSL's kernel string (weight 0.3) says more than any GeForce card (0.2): the candidates follow the catalog weights.
    # (The two modes are related, so the ranker then puts the earlier line first when their confidences are within
    # ranker.CLOSE: line order among one story's modes; the candidates' own order is clues.candidates'.)
    got = [c.failure for c in clues.candidates(collect([GEFORCE_3090, WSL_KERNEL, TORCHRUN_EXIT_1]),
                                               catalog.failures(), set(), lambda fid: False)]
    assert got == ["WSL_NCCL_UNSUPPORTED", "CONSUMER_GPU_P2P_BROKEN"]
    ex = explain([GEFORCE_3090, WSL_KERNEL, TORCHRUN_EXIT_1])
    assert_candidate(ex, "WSL_NCCL_UNSUPPORTED", 2)
    assert_candidate(ex, "CONSUMER_GPU_P2P_BROKEN", 1)


def test_within_one_tier_the_more_reported_mode_goes_first():
    # a Windows path is the line of three modes; the dev corpus carries WINDOWS_NO_NCCL_BACKEND most often
    got = [c.failure for c in clues.candidates(collect([WINDOWS_10049]), catalog.failures(), set(), lambda fid: False)]
    assert got[:2] == ["WINDOWS_NO_NCCL_BACKEND", "WINDOWS_LIBUV_UNSUPPORTED"], got


def test_a_windows_path_lists_the_windows_modes_the_most_reported_first():
    # the only line is c10d's 10049 warning, which alone decides nothing (lookup_warning_only); the Windows path in
    # its prefix points at the three Windows modes; dev logs carry WINDOWS_NO_NCCL_BACKEND most often
    ex = explain([WINDOWS_10049])
    assert ids(ex) == ["WINDOWS_HOSTS_FILE_REVERSE_NAME", "WINDOWS_NO_NCCL_BACKEND", "WINDOWS_LIBUV_UNSUPPORTED"]
    assert clues.DEV_LABELS["WINDOWS_NO_NCCL_BACKEND"] > clues.DEV_LABELS["WINDOWS_LIBUV_UNSUPPORTED"]
    assert_candidate(ex, "WINDOWS_NO_NCCL_BACKEND", 1)
    assert_candidate(ex, "WINDOWS_LIBUV_UNSUPPORTED", 1)
    assert "the job runs on Windows" in by_id(ex, "WINDOWS_NO_NCCL_BACKEND").notes[-1]


def test_a_log_that_names_its_cause_lists_no_candidates():
    ex = explain([WINDOWS_10049, "RuntimeError: Distributed package doesn't have NCCL built in"])
    assert ids(ex)[0] == "WINDOWS_NO_NCCL_BACKEND" and ex.diagnoses[0].confidence >= 0.9
    assert "WINDOWS_LIBUV_UNSUPPORTED" not in ids(ex)
    assert not any("possible cause" in n for d in ex.diagnoses for n in d.notes)


def test_the_legacy_launchers_frames_make_the_local_rank_argument_a_candidate():
    # torch.distributed.launch passes --local-rank to the script (torch/distributed/run.py config_from_args)
    ex = explain(LEGACY_LAUNCHER)
    assert_candidate(ex, "LOCAL_RANK_ARG_MISMATCH", 2)
    assert_after_the_logs_own_readings(ex, "LOCAL_RANK_ARG_MISMATCH")


def test_torchrun_frames_are_no_clue_for_the_local_rank_argument():
    ex = explain([line.replace("distributed/launch.py", "distributed/run.py") for line in LEGACY_LAUNCHER])
    assert "LOCAL_RANK_ARG_MISMATCH" not in ids(ex)


def test_a_shared_line_lists_every_sibling_of_failure_catalog_section_3():
    # `gai error` / socket.gaierror: HOSTNAME_UNRESOLVABLE, MASTER_ADDR_MALFORMED, K8S_DNS_NOT_READY
    ex = explain(["socket.gaierror: [Errno -2] Name or service not known"])
    assert ids(ex) == ["HOSTNAME_UNRESOLVABLE", "MASTER_ADDR_MALFORMED", "K8S_DNS_NOT_READY"]
    assert_candidate(ex, "MASTER_ADDR_MALFORMED", 1)
    assert_candidate(ex, "K8S_DNS_NOT_READY", 1)
    assert "HOSTNAME_UNRESOLVABLE" in by_id(ex, "K8S_DNS_NOT_READY").notes[-1]   # says who else prints the line


def test_candidates_come_after_what_the_log_itself_supports():
    ex = explain(["socket.gaierror: [Errno -2] Name or service not known"])
    head, *rest = ex.diagnoses
    assert all(d.confidence < head.confidence for d in rest)


def test_at_most_three_candidates():
    ex = explain(["node1:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>",
                  "node1:1:1 [0] NCCL INFO NET/IB : No device found.", WSL_KERNEL, GEFORCE_3090,
                  '  File "C:\\Users\\me\\train.py", line 12, in <module>', TORCHRUN_EXIT_1])
    listed = [d for d in ex.diagnoses if any("possible cause" in n for n in d.notes)]
    assert len(listed) == 3, ids(ex)
    # the most specific first: NCCL on docker0 (weight 0.5) before the weaker clues
    assert listed[0].failure.id == "NCCL_WRONG_INTERFACE_AUTOSELECTED"
    # the GeForce card and the Windows path are the weakest clues here: not listed, not even as clue-only modes
    assert "CONSUMER_GPU_P2P_BROKEN" not in ids(ex) and "WINDOWS_NO_NCCL_BACKEND" not in ids(ex), ids(ex)


def test_a_generic_symptom_the_differential_owns_keeps_its_own_candidates():
    # NCCL's system error on one node: differential.py lists the /dev/shm readings; the line's catalog siblings that
    # the context does not support (WSL without a WSL marker) are not lifted by their base rate
    ex = explain(["RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled "
                  "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"])
    assert ids(ex)[:2] == ["NCCL_SYSTEM_ERROR", "NCCL_SHM_TOO_SMALL"]
    assert "WSL_NCCL_UNSUPPORTED" not in ids(ex)
    assert "DEV_SHM_PERMISSION_DENIED" in ex.diagnoses[0].notes[-1]   # §3's other /dev/shm reading, named


def test_nccl_system_error_between_containers_names_the_bridge_network():
    ex = explain(["0123456789ab:1:1 [0] NCCL INFO cudaDriverVersion 12010",
                  "ba9876543210:1:1 [0] NCCL INFO cudaDriverVersion 12010",
                  "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled "
                  "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"])
    assert ids(ex)[0] == "NCCL_SYSTEM_ERROR"
    assert "CONTAINER_BRIDGE_NETWORK" in ids(ex)[1:3]
    assert by_id(ex, "CONTAINER_BRIDGE_NETWORK").confidence < SHOW_FULL


def test_candidates_render_as_weaker_alternatives_with_their_command():
    text = render_text(explain([GEFORCE_3090, TORCHRUN_EXIT_1]))
    assert "CONSUMER_GPU_P2P_BROKEN" in text
    assert "NCCL_P2P_DISABLE=1" in text


def test_the_dev_label_table_is_the_manifests_dev_split():
    manifest = Path(__file__).resolve().parent / "corpus" / "manifest.jsonl"
    counts = clues.dev_label_counts(manifest.read_text().splitlines())
    known = catalog.failures()
    assert {k: v for k, v in counts.items() if k in known} == clues.DEV_LABELS


def test_every_clue_the_module_relies_on_is_in_the_catalog():
    fms = catalog.failures()
    names = {(fid, s.name): s for fid, fm in fms.items() for s in fm.signatures}
    for key in [("CONSUMER_GPU_P2P_BROKEN", "GEFORCE_ANY"), ("LOCAL_RANK_ARG_MISMATCH", "LEGACY_LAUNCHER_FRAME"),
                ("WINDOWS_NO_NCCL_BACKEND", "WINDOWS_PATH"), ("K8S_DNS_NOT_READY", "GAI_ERROR")]:
        assert key in names, key
    assert names[("LOCAL_RANK_ARG_MISMATCH", "LEGACY_LAUNCHER_FRAME")].role == "clue"
    assert set(clues.DEV_LABELS) <= set(fms)

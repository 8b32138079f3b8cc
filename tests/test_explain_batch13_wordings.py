"""Wordings of the code that prints them, missed on corpus batch 13 (issue 23 §1): accelerate's own port check
(src/accelerate/utils/launch.py, v0.21.0 .. v1.14.0), the watchdog's line wrapped inside "WorkNCCL(" (torch's
ProcessGroupNCCL.cpp WorkNCCL::checkTimeout), srun's step error with the job id redacted (Slurm's launch.c), errno 24
read by its number (CPython's OSError_str, strerror in the user's locale), the remote shell not finding Open MPI's
orted (bash's "command not found" for plm_rsh's remote command), Open MPI's OOB TCP connect failure
(oob_tcp_connection.c), NCCL 2.3's "NET : Using interface" line (src/include/socket.h). Lines are the templates as
those releases fill them; each test also pins what the line must not be taken for."""
import subprocess

import pytest

from ddpdoctor.logscan.render import LOW, SHOW_FULL
from test_explain_calibration import explain, top

ACCELERATE = ("ConnectionError: Tried to launch distributed communication on port {}, but another process is utilizing "
              "it. Please specify a different port (such as using the `--main_process_port` flag or specifying a "
              "different `main_process_port` in your config file) and rerun your script. To automatically use the next "
              "open port (on a single node), you can set this to `0`.")


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def test_accelerate_s_port_check_names_the_port_in_use_with_or_without_markdown_backticks():
    for port in ("`29500`", "29401"):
        ex = explain([ACCELERATE.format(port)])
        fid, c = top(ex)
        assert fid == "MASTER_PORT_IN_USE" and c >= LOW, port
        assert any("29500" in n or "29401" in n for d in ex.diagnoses for n in [d.evidence[0].note or ""]), port
    # v1.14's single-machine warning picks another port and goes on: no failure
    assert "MASTER_PORT_IN_USE" not in ids(explain([
        "UserWarning: Port `29500` is already in use. Accelerate will attempt to launch in a standalone-like mode by "
        "finding an open port automatically for this session."]))


WATCHDOG_HEAD = ("[rank1]:[E210 02:06:33.347835395 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 1] Process group "
                 "watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: "
                 "WorkNCCL(")


def test_the_watchdog_line_wrapped_inside_worknccl_is_still_the_collective_timeout():
    for cut in ("S", "SeqNum=1522789, ", ""):
        ex = explain([WATCHDOG_HEAD + cut, "eqNum=1522789, OpType=_ALLGATHER_BASE, NumelIn=298960, NumelOut=4783360, "
                      "Timeout(ms)=600000) ran for 600003 milliseconds before timing out."])
        fid, c = top(ex)
        assert fid == "NCCL_COLLECTIVE_TIMEOUT" and SHOW_FULL <= c < LOW, cut   # a symptom: which rank lagged is open
    # an unrelated line that merely ends in "WorkNCCL(" is not the watchdog's
    assert "NCCL_COLLECTIVE_TIMEOUT" not in ids(explain(["frame #3: c10d::ProcessGroupNCCL::WorkNCCL("]))


def test_srun_s_gres_step_error_reads_with_a_redacted_job_id_but_not_without_one():
    for job in ("53054263", "X", "<jobid>"):
        ex = explain([f"srun: error: Unable to create step for job {job}: Invalid generic resource (gres) "
                      "specification"])
        assert top(ex)[0] == "SLURM_GRES_INHERITED_FROM_ALLOCATION", job
    # the allocation's own refusal is not a step inside an allocation
    assert "SLURM_GRES_INHERITED_FROM_ALLOCATION" not in ids(explain([
        "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"]))


def test_errno_24_is_the_open_files_limit_in_any_case_or_language_and_errno_2_is_not():
    for line in ("OSError: [Errno 24] Too many open files", "OSERROR: [Errno 24] Too many files open.",
                 "OSError: [Errno 24] Zu viele offene Dateien"):
        assert top(explain([line]))[0] == "DATALOADER_OPEN_FILES_LIMIT", line
    for line in ("OSError: [Errno 2] No such file or directory: 'a.txt'", "OSError: [Errno 241] made up"):
        assert "DATALOADER_OPEN_FILES_LIMIT" not in ids(explain([line])), line


ORTE = ["ORTE was unable to reliably start one or more daemons.", "This usually is caused by:"]


def test_orted_not_found_on_the_remote_node_is_the_launcher_path_not_ssh():
    ex = explain(["bash: orted: command not found"] + ORTE)
    fid, c = top(ex)
    assert fid == "LAUNCHER_NOT_ON_PATH" and c >= LOW
    # ORTE's daemons failing without the shell's line stays ssh's reading
    assert top(explain(ORTE))[0] == "LAUNCHER_SSH_UNREACHABLE"
    # a daemon that merely mentions orted in another error is not its PATH
    assert "LAUNCHER_NOT_ON_PATH" not in ids(explain(["orted_main: error: orted_setup not found in table"]))


@pytest.mark.torchjob   # runs the real shells
def test_the_installed_shells_own_words_for_a_missing_orted_are_read():
    # what ssh's remote shell prints, from the real shells: bash (5.1+ adds "line 1:" under -c) and dash
    for shell in ("/bin/bash", "/bin/sh"):
        err = subprocess.run([shell, "-c", "orted --daemonize"], env={"PATH": "/nonexistent"}, capture_output=True,
                             text=True, timeout=10).stderr.strip()
        assert "orted" in err and "not found" in err, err
        fid, c = top(explain([err] + ORTE))
        assert fid == "LAUNCHER_NOT_ON_PATH" and c >= LOW, err


def test_open_mpi_s_oob_tcp_failure_reads_as_a_firewall_below_low_confidence():
    ex = explain(["A process or daemon was unable to complete a TCP connection", "to another process:",
                  "  Local host:    node1", "  Remote host:   node2"])
    fid, c = top(ex)
    assert fid == "FIREWALL_BLOCKS_PORTS" and SHOW_FULL <= c < LOW   # the text says "usually": an interface is possible


def test_nccl_2_3_s_using_interface_lo_line_is_a_clue_and_does_not_hide_a_refused_connect_s_readings():
    refused = "node2:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused"
    without = explain([refused])
    assert ids(without)
    for info in ("node2:4152:4206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>",       # NCCL 2.3
                 "node2:4152:4206 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>"):      # NCCL 2.4+
        # the refused connect keeps the readings it has without the INFO line (the clue is no decided cause); since
        # NCCL 2.3's exhausted retries read as NCCL_WRONG_INTERFACE_AUTOSELECTED (batch 14), the clue strengthens the
        # first and the weakest (RDZV_STORE_HOST_EXITED at 0.21) may fall off the list: the first three stay
        assert set(ids(without)[:3]) <= set(ids(explain([info, refused]))), info
        # and the line is read as NCCL using loopback once the log shows a failure
        failed = explain([info, "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:290, unhandled "
                          "system error, NCCL version 2.3.7"])
        assert "NCCL_WRONG_INTERFACE_AUTOSELECTED" in ids(failed), info
    # an interface that is neither loopback nor virtual is no clue
    assert "NCCL_WRONG_INTERFACE_AUTOSELECTED" not in ids(explain([
        "node2:4152:4206 [0] NCCL INFO NET : Using interface eth0:10.151.40.240<0>", "RuntimeError: NCCL error"]))


GAI = "[W socket.cpp:601] [c10d] The IPv6 network addresses of ({}, 37340) cannot be retrieved (gai error: {})."


def test_the_ipv6_lookup_warning_alone_is_shown_as_a_low_confidence_unresolvable_name_on_linux_only():
    # glibc's EAI_NONAME: shown, low confidence (dev counts in rules.lookup_warning_only)
    fid, c = top(explain([GAI.format("i-7840df31", "-2 - Name or service not known")]))
    assert fid == "HOSTNAME_UNRESOLVABLE" and SHOW_FULL <= c < LOW
    # macOS's positive EAI_NONAME (8): its IPv6 warning on any IPv4-only name stays hidden
    mac = explain([GAI.format("mbp.local", "8 - nodename nor servname provided, or not known")])
    assert all(d.confidence < SHOW_FULL for d in mac.diagnoses)

"""The emitted templates reach their signature through the log scanner's gate pass, not only through the regex.

tests/test_catalog_templates.py renders each recorded format string and searches the signature's regex in it (and runs
explain on causes). A wording the regex was widened to take can still never reach the regex when no gate word of the
scanner is in that line: NCCL 2.24.3+ prints `Bootstrap: Using` (no space before the colon, src/bootstrap.cc) where
the shared gate is ' : using '; Slurm 23.02+ `srun: warning: can't honor` in lower case (src/common/log.c warning()).
Here every rendered line goes through logscan's default matcher, which finds lines by gate words, checks triggers and
only then the regex, as `explain --log` does.
"""

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import default_matcher

from logtext import found
from test_catalog_templates import render

EMITTED = [(fm, s, e) for fm in catalog.failures().values() for s in fm.signatures for e in s.emitted]


@pytest.fixture(scope="module")
def matcher():
    return default_matcher()


@pytest.mark.parametrize("fm,sig,e", EMITTED, ids=lambda x: getattr(x, "id", None) or getattr(x, "name", None)
                         or getattr(x, "versions", "?"))
def test_the_scanner_reaches_the_signature_on_the_line_its_code_prints(matcher, fm, sig, e):
    line = e.prefix + render(e.template, e.values)
    assert (fm.id, sig.name) in found(matcher, line), (fm.id, sig.name, e.versions, line)


@pytest.mark.parametrize("line,mode,name", [
    # NCCL 2.24.3+ (src/bootstrap.cc): before, only ' : Using' passed the gate
    ("node1:1234:1300 [0] NCCL INFO Bootstrap: Using docker0:172.17.0.1<0>", "NCCL_WRONG_INTERFACE_AUTOSELECTED", "USING"),
    # NCCL 2.27.3+ (socketConnectCheck): 'connect to <addr> returned', before 'Call to connect returned'
    ("node2:88:88 [0] NCCL INFO socketPollConnect: connect to 172.17.0.1<45211> returned Connection refused, retrying "
     "(2/34) after sleep for 200 msec", "NCCL_WRONG_INTERFACE_AUTOSELECTED", "TIMED_OUT"),
    # Slurm 23.02+ (warning(): 'warning: ' prefix)
    ("srun: warning: can't honor --ntasks-per-node set to 8 which doesn't match the requested tasks 4 with the "
     "maximum number of requested nodes 1. Ignoring --ntasks-per-node.", "SLURM_NTASKS_MISMATCH", "SRUN_WARNING_CAN_T_HONOR"),
    # Open MPI 5 (PRRTE 3.x help-errmgr-base.txt: '%s was unable ...' with the tool's name)
    ("mpirun was unable to reliably start one or more daemons.", "LAUNCHER_SSH_UNREACHABLE", "ORTE_DAEMONS"),
    # torch socket.cpp: the IPv4 try after the IPv6 one (prefer_ipv6), whose errors the exception carries
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of "
     "(job-master-0.job.default.svc, 29500). The IPv4 network addresses of (job-master-0.job.default.svc, 29500) cannot "
     "be retrieved (gai error: -2 - Name or service not known).", "K8S_DNS_NOT_READY", "NAME_LOOKUP_FAILED"),
    # UCX 1.12-1.15 ('Local length on ...') under its 'UCX  ERROR' level
    ("[1700000000.123456] [node1:1234:0]     ib_mlx5_log.c:162  UCX  ERROR Local length on mlx5_0:1/IB (synd 0x1 "
     "vend 0x69 hw_synd 0/0)", "MTU_MISMATCH", "LOCAL_LENGTH_ERROR"),
    # NCCL 2.10-2.17 print the status as a number: 1 is IBV_WC_LOC_LEN_ERR
    ("node1:1:2 [0] transport/net_ib.cc:1198 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<51220> with error 1, "
     "opcode 0, len 0, vendor err 105", "MTU_MISMATCH", "GOT_COMPLETION"),
])
def test_wordings_the_code_shows_and_no_earlier_pattern_took(matcher, line, mode, name):
    assert (mode, name) in found(matcher, line)


@pytest.mark.parametrize("line", [
    # a completion error other than IBV_WC_LOC_LEN_ERR (12 = retry exceeded) is not an MTU reading
    "node1:1:2 [0] transport/net_ib.cc:1198 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<51220> with error 12, "
    "opcode 0, len 0, vendor err 129",
    "NET/IB: Got completion from peer 10.0.0.2<51220> with status=12 opcode=0 len=0 vendor err 129 (Recv) hca mlx5_0",
    # other UCX errors under the same level word
    "[1700000000.123456] [node1:1234:0]     ib_mlx5_log.c:177  UCX  ERROR Transport retry count exceeded on mlx5_0:1/RoCE "
    "(synd 0x15 vend 0x81 hw_synd 0/0)",
])
def test_the_widened_mtu_patterns_keep_to_their_status(matcher, line):
    assert not {n for m, n in found(matcher, line) if m == "MTU_MISMATCH"}

"""Wordings of the code that prints them, missed on corpus batch 12 (issue 23 §1): NCCL's duplicate-GPU check quoted
without its "Duplicate GPU detected :" prefix, the elastic agent's keep-alive warning when the store's host is gone
(torch's dynamic_rendezvous.py _keep_alive), Gloo's timeout with both directions in one quote, NCCL's reverse-path
WARN (src/graph/paths.cc) before the release that read H100 NVLinks right (2.15.1), and the queue pair's local access
violation (ibv_event_type_str of IBV_EVENT_QP_ACCESS_ERR) that an MTU mismatch raises from NCCL 2.20.3.
Lines are the templates as those releases fill them; each test also pins what the line must not be taken for."""
from ddpdoctor.logscan.render import LOW, SHOW_FULL
from test_explain_calibration import explain, top


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def conf(ex, fid):
    return max((d.confidence for d in ex.diagnoses if d.failure.id == fid), default=0.0)


def test_nccl_s_duplicate_gpu_check_is_decisive_with_or_without_its_prefix():
    for line in ["node1:1234:1300 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA "
                 "device 1000",
                 'I got an error "rank 8 and rank 0 both on CUDA device d000" with two nodes']:
        ex = explain([line])
        assert top(ex)[0] == "DUPLICATE_GPU_PER_RANK" and top(ex)[1] >= LOW, line
    # the words without the rank pair are not the check
    assert "DUPLICATE_GPU_PER_RANK" not in ids(explain(["model and optimizer both on CUDA device 0"]))


KEEP_ALIVE = ("W1104 09:12:40.118204 139872114390784 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1267] "
              "The node 'node2_3427_0' has failed to send a keep-alive heartbeat to the rendezvous 'job-42' due to an "
              "error of type {}.")


def test_a_keep_alive_that_cannot_connect_means_the_store_host_went_away_and_a_timeout_does_not():
    ex = explain([KEEP_ALIVE.format("RendezvousConnectionError")])
    fid, c = top(ex)
    assert fid == "RDZV_STORE_HOST_EXITED" and SHOW_FULL <= c < LOW   # a consequence: the cause is on the store host
    # a keep-alive that timed out is a slow or hung store (the master's own agent logs it too)
    assert "RDZV_STORE_HOST_EXITED" not in ids(explain([KEEP_ALIVE.format("RendezvousTimeoutError")]))


def test_gloo_s_timeout_quoted_with_both_directions_is_still_gloo_s_timeout():
    for op in ("recv", "recv/send"):
        ex = explain([f"RuntimeError: Timed out waiting 600000ms for {op} operation to complete"])
        assert top(ex)[0] == "GLOO_COLLECTIVE_TIMEOUT", op
    assert "GLOO_COLLECTIVE_TIMEOUT" not in ids(explain(["Timed out waiting 600000ms for recv/copy operation to complete"]))


REVERSE = ("node1:4211:4290 [0] graph/paths.cc:79 NCCL WARN Failed to find reverse path from remNode 0/5f000 nlinks 4 "
           "to node 0/cb000")


def test_the_reverse_path_warn_is_a_release_bug_only_with_an_nccl_older_than_2_15_1():
    old = explain(["NCCL version 2.14.3+cuda11.7", REVERSE])
    fid, c = top(old)
    assert fid == "NCCL_RELEASE_BUG" and SHOW_FULL <= c < LOW      # the fix is for H100: the log seldom names the GPU
    assert "2.15.1" in " ".join(old.diagnoses[0].notes)
    # NCCL 2.5's wording of the same WARN
    v25 = explain(["NCCL version 2.5.6+cuda10.1", "node1:1:1 [0] graph/paths.cc:71 NCCL WARN Failed to find reverse "
                   "path from remNode id 0 type 1 nlinks 4 to node id 3 type 0"])
    assert top(v25)[0] == "NCCL_RELEASE_BUG"
    # a release with the fix: the WARN is something else, and not named at full confidence
    assert conf(explain(["NCCL version 2.18.5+cuda12.2", REVERSE]), "NCCL_RELEASE_BUG") < SHOW_FULL


ACCESS = "node2:51810:51862 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got async event : {}"


def test_a_queue_pair_s_local_access_violation_makes_an_mtu_mismatch_a_candidate_not_an_answer():
    ex = explain([ACCESS.format("local access violation work queue error")])
    assert "MTU_MISMATCH" in ids(ex)[:3] and conf(ex, "MTU_MISMATCH") < SHOW_FULL   # a bad registration does it too
    fatal = explain(["node2:1:1 [0] transport/net_ib.cc:152 NCCL WARN NET/IB : mlx5_0:1 async fatal event on QP "
                     "(0x7f69f01519a8): local access violation work queue error"])
    assert "MTU_MISMATCH" in ids(fatal)[:3] and conf(fatal, "MTU_MISMATCH") < SHOW_FULL
    # another async event is not this one
    assert "MTU_MISMATCH" not in ids(explain([ACCESS.format("port error")]))
    # the length error that older NCCL reports for the same fault decides
    loc_len = explain(["node1:1:1 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                       "10.20.0.12<47166> with status=IBV_WC_LOC_LEN_ERR(1) opcode=128 len=4096 vendor err 105 (Recv)"])
    assert top(loc_len)[0] == "MTU_MISMATCH" and top(loc_len)[1] >= SHOW_FULL


def test_a_queue_pair_s_fatal_event_is_not_a_fabric_fault_and_the_device_s_is():
    """ncclIbAsyncThreadMain (net_ib/common.cc, NCCL 2.23+): IBV_EVENT_DEVICE_FATAL prints "async fatal event: %s"
    (the HCA itself failed); QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR print "async fatal event on QP (%p): %s" and
    CQ_ERR "... on CQ (%p)": one queue's error (a wrong HCA, an MTU, a bad request), not a fault of the fabric."""
    pre = "node-0:5911:5971 [0] transport/net_ib/common.cc:160 NCCL WARN NET/IB : mlx5_3:1 "
    assert top(explain([pre + "async fatal event: device fatal"]))[0] == "IB_FABRIC_FAULT"
    for ev in ["async fatal event on QP (0x732d78661238): invalid request local work queue error",
               "async fatal event on CQ (0x732d78661238): CQ error"]:
        assert "IB_FABRIC_FAULT" not in ids(explain([pre + ev])), ev

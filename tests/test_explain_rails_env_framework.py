"""Three failure modes users hit that the catalog lacked (issue 23), each read from what its emitting code prints:
NCCL's ibv_modify_qp timeout between NICs of different rails (NVIDIA/nccl src/misc/ibvwrap.cc), NCCL settings that
differ between nodes (src/misc/param.cc's environment echo), and an exception raised inside a training framework's
own code (the traceback's last frame)."""
import io
from pathlib import Path

from ddpdoctor.logscan import explain_stream

LOGS = Path(__file__).resolve().parent / "logs"


def explain(text: str):
    return explain_stream(io.BytesIO(text.encode()), "t.log")


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


# NCCL >= 2.24 prints both GIDs (ibvModifyQpLog); 2.4 - 2.23 only the errno text.
QP = ("node7:51234:51390 [3] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, "
      "on dev mlx5_3:1, curr state INIT, next state RTR, local GID index 3, local GID {l}, remote GID {r}\n")


def test_a_queue_pair_timing_out_between_two_ipv4_gids_is_rails_not_the_gid_index_and_says_it_is_unsure():
    ex = explain(QP.format(l="::ffff:10.3.0.7", r="::ffff:10.5.0.8"))
    top = ex.diagnoses[0]
    assert top.failure.id == "IB_CROSS_RAIL_UNREACHABLE" and 0.35 <= top.confidence < 0.5   # low confidence alone
    gid = next(d for d in ex.diagnoses if d.failure.id == "IB_ROCE_GID_MISMATCH")
    assert gid.confidence <= 0.3 and any("GID index is the right kind" in n for n in gid.notes)


def test_a_link_local_gid_keeps_the_gid_index_reading():
    ex = explain(QP.format(l="fe80::ba59:9f03:fa:1234", r="fe80::ba59:9f03:fa:5678"))
    assert ids(ex)[0] == "IB_ROCE_GID_MISMATCH" and "IB_CROSS_RAIL_UNREACHABLE" not in ids(ex)


def test_the_older_wording_without_gids_stays_the_gid_index_reading():
    ex = explain("node1:1:2 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out\n")
    assert ids(ex)[0] == "IB_ROCE_GID_MISMATCH"


def test_nccls_own_cross_rail_hint_decides():
    with open(LOGS / "IB_CROSS_RAIL_UNREACHABLE" / "excerpt-modify-qp-timeout-rails.log", "rb") as f:
        ex = explain_stream(f, "x")
    top = ex.diagnoses[0]
    assert top.failure.id == "IB_CROSS_RAIL_UNREACHABLE" and top.confidence >= 0.5
    assert top.failure.fix.env == {"NCCL_CROSS_NIC": "0"}


def test_an_nccl_variable_with_different_values_on_two_hosts_is_named_with_both_values():
    with open(LOGS / "NCCL_ENV_MISMATCH_ACROSS_NODES" / "excerpt-buffsize-differs.log", "rb") as f:
        ex = explain_stream(f, "x")
    top = ex.diagnoses[0]
    assert top.failure.id == "NCCL_ENV_MISMATCH_ACROSS_NODES" and top.confidence >= 0.5
    assert any("NCCL_BUFFSIZE differs between hosts (524288 on node2; 8388608 on node1)" in n for n in top.notes)


def test_interface_names_may_differ_per_node_and_a_healthy_log_is_no_failure():
    same = ("node1:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n"
            "node2:2:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib1\n"
            "node1:1:1 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
            "node2:2:2 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n")
    assert "NCCL_ENV_MISMATCH_ACROSS_NODES" not in ids(explain(same))
    differ = same.replace("node2:2:2 [0] NCCL INFO NCCL_PROTO set by environment to Simple",
                          "node2:2:2 [0] NCCL INFO NCCL_PROTO set by environment to LL128")
    # no failure in the log: possible, never a full answer
    assert all(d.confidence < 0.35 for d in explain(differ).diagnoses)
    failed = differ + "[rank0]: RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1\n"
    top = explain(failed).diagnoses[0]
    assert top.failure.id == "NCCL_ENV_MISMATCH_ACROSS_NODES" and "NCCL_PROTO differs" in top.notes[0]


def test_the_collective_mismatch_error_alone_names_both_readings_with_low_confidence():
    ex = explain("node2:3:4 [0] transport/net_ib.cc:1038 NCCL WARN NET/IB : req 0/1 tag 0 peer 10.0.0.1<58683> "
                 "collective mismatch error, local size 524288 remote size 8388608\n")
    assert ids(ex)[:2] == ["COLLECTIVE_MISMATCH_ACROSS_RANKS", "NCCL_ENV_MISMATCH_ACROSS_NODES"]   # the code comment's reading
    assert all(d.confidence < 0.5 for d in ex.diagnoses)


TB = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/home/me/proj/train.py", line 118, in main
[rank1]:     trainer.train()
[rank1]:   File "{raiser}", line 940, in {func}
[rank1]:     raise ValueError("bad")
[rank1]: ValueError: {msg}
E1125 20:55:52.984000 11041 api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 11423) of binary: /usr/bin/python3
"""


def test_an_exception_raised_in_a_frameworks_code_names_the_framework_its_line_and_the_jobs_call():
    with open(LOGS / "TRAINING_FRAMEWORK_EXCEPTION" / "excerpt-deepspeed-zero2-assert.log", "rb") as f:
        ex = explain_stream(f, "x")
    top = ex.diagnoses[0]
    assert top.failure.id == "TRAINING_FRAMEWORK_EXCEPTION" and top.confidence >= 0.5
    assert ("rank 1 raised AssertionError in deepspeed's code at stage_1_and_2.py:940 in "
            "reduce_independent_p_g_buckets_and_remove_grads (called from train.py:118 in main)") in top.notes[0]
    assert "USER_CODE_EXCEPTION" not in ids(ex)


def test_the_jobs_own_raise_stays_user_code_and_torchs_raise_is_not_a_framework():
    own = explain(TB.format(raiser="/home/me/proj/model.py", func="forward", msg="shapes differ"))
    assert ids(own)[0] == "USER_CODE_EXCEPTION"
    fw = explain(TB.format(raiser="/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", func="train",
                           msg="--load_best_model_at_end requires the save and eval strategy to match"))
    assert ids(fw)[0] == "TRAINING_FRAMEWORK_EXCEPTION" and "in transformers's code at trainer.py:940" in fw.diagnoses[0].notes[0]
    torch_raise = explain(TB.format(raiser="/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
                                    func="__getattr__", msg="shapes differ"))
    assert "TRAINING_FRAMEWORK_EXCEPTION" not in ids(torch_raise)


STORE_TIMEOUT = ("[E521 15:43:02.707733876 socket.cpp:1023] [c10d] The client socket has timed out after 600000ms while "
                 "trying to connect to (172.18.21.4, 37907).\n")


def test_a_high_store_port_is_a_port_picked_after_the_rendezvous_only_when_the_log_shows_that_rendezvous():
    alone = explain(STORE_TIMEOUT)
    assert ids(alone)[0] == "RDZV_ENDPOINT_UNREACHABLE"
    fw = next(d for d in alone.diagnoses if d.failure.id == "FIREWALL_BLOCKS_PORTS")
    assert fw.confidence <= 0.4 and any("nothing in the log shows a rendezvous" in n for n in fw.notes)
    after = explain("  rdzv_endpoint    : node1:29400\n  run_id           : job42\n" + STORE_TIMEOUT)
    assert ids(after)[0] == "FIREWALL_BLOCKS_PORTS"


def test_retries_exhausted_between_two_ipv4_gids_point_at_the_path_not_the_gid_index():
    line = ("mycl-g2:3:4 [6] transport/net_ib.cc:2470 NCCL WARN NET/IB: Got completion from peer 192.168.3.5<53908> with "
            "status=12 opcode=129 len=1048576 vendor err 129 (Recv) localGid {l} remoteGids{r} hca mlx5_10\n")
    v4 = explain(line.format(l="::ffff:192.168.6.3", r="::ffff:192.168.6.5"))
    assert ids(v4)[:2] == ["IB_FABRIC_FAULT", "IB_ROCE_GID_MISMATCH"] and v4.diagnoses[0].confidence < 0.5
    link_local = explain(line.format(l="fe80::ba59:9f03:fa:1234", r="fe80::ba59:9f03:fa:5678"))
    assert ids(link_local)[0] == "IB_ROCE_GID_MISMATCH"


def test_the_file_stores_own_timeouts_say_a_rank_never_joined_with_low_confidence():
    for line in ("RuntimeError: Wait timeout\n",
                 "[rank0]: torch.distributed.DistStoreError: Timeout waiting for key: default_pg/0//cpu//0/1 after 1800000 ms\n"):
        top = explain('  File "/x/torch/distributed/distributed_c10d.py", line 283, in init_process_group\n' + line).diagnoses[0]
        assert top.failure.id == "RDZV_NODES_MISSING" and 0.35 <= top.confidence < 0.5
    assert not explain("INFO: Wait timeout reached, retrying\n").diagnoses


def test_glooss_enforce_condition_says_whether_an_interface_or_the_nodes_own_name_has_no_address():
    iface = explain("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
                    "Unable to find address for: eth9\n")
    assert ids(iface)[0] == "GLOO_SOCKET_IFNAME_INVALID"
    host = explain("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:127] rp != nullptr. "
                   "Unable to find address for: dgx-1.ai\n")
    assert ids(host)[0] == "HOSTNAME_UNRESOLVABLE" and host.diagnoses[0].confidence >= 0.5
    bound = explain("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:125] bind_rv == 0. "
                    "Unable to find address for node7; bind(2) for 10.9.8.7 failed with: Cannot assign requested address\n")
    assert ids(bound)[0] == "HOSTNAME_UNRESOLVABLE"



def test_the_dataloaders_own_emfile_message_decides_and_errno_24_alone_is_low():
    with open(LOGS / "DATALOADER_OPEN_FILES_LIMIT" / "excerpt-dataloader-emfile.log", "rb") as f:
        ex = explain_stream(f, "x")
    assert ids(ex)[0] == "DATALOADER_OPEN_FILES_LIMIT" and ex.diagnoses[0].confidence >= 0.5
    assert "USER_CODE_EXCEPTION" not in ids(ex)   # the message is torch's, explained by the catalog
    bare = explain("OSError: [Errno 24] Too many open files\n").diagnoses[0]
    assert bare.failure.id == "DATALOADER_OPEN_FILES_LIMIT" and bare.confidence < 0.5
    shm = explain("RuntimeError: unable to open shared memory object </torch_1_2_0> in read-write mode: "
                  "Too many open files (24)\n").diagnoses[0]
    assert shm.failure.id == "DATALOADER_OPEN_FILES_LIMIT" and shm.confidence >= 0.5
    cleared = explain("RuntimeError: unable to open shared memory object </torch_1_2_0> in read-write mode: "
                      "No such file or directory (2)\n")
    assert "DATALOADER_OPEN_FILES_LIMIT" not in ids(cleared)


def test_a_tcp_init_method_without_a_rank_is_a_script_nothing_launched():
    top = explain("ValueError: Error initializing torch.distributed using tcp:// rendezvous: rank parameter missing\n").diagnoses[0]
    assert top.failure.id == "SCRIPT_WITHOUT_LAUNCHER" and top.confidence >= 0.5


def test_windows_getaddrinfo_failure_and_the_flight_recorder_dump_line_are_read():
    assert ids(explain("socket.gaierror: [Errno 11001] getaddrinfo failed\n"))[0] == "HOSTNAME_UNRESOLVABLE"
    dump = explain("[rank0]:[E804 23:05:54.817424543 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
                   "Received a dump signal due to a collective timeout from  rank 13 and we will try our best to dump the "
                   "debug info. Last enqueued NCCL work: 2047, last completed NCCL work: 2046.\n")
    top = dump.diagnoses[0]
    assert top.failure.id == "NCCL_COLLECTIVE_TIMEOUT" and top.confidence < 0.5


def test_enomem_from_verbs_in_another_librarys_words_points_at_memlock_with_low_confidence():
    top = explain("ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory.\n").diagnoses[0]
    assert top.failure.id == "IB_MEMLOCK_LIMIT" and top.confidence < 0.5

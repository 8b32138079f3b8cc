"""A consequence is not the answer either (issue 23 §2, ddpdoctor/logscan/symptoms.py): the symptoms that end most
failed jobs (an NCCL watchdog timeout, a hung watchdog, a worker killed by a signal, a rendezvous timeout, a Gloo peer
that closed its connection, ncclRemoteError, `No route to host` to the store) stay the headline, and the specific
causes the rest of the log points at follow as weaker candidates, each with why it came up and what would decide.
The lines are the wording of real pastes (tests/corpus/dev) and of the code that prints them (the catalog's
`emitted` templates), behind the prefixes torchrun, pdsh and NCCL put in front of them."""

from ddpdoctor import catalog
from ddpdoctor.logscan import symptoms
from ddpdoctor.logscan.render import LOW, SHOW_FULL, render_text
from logtext import explain, ids, by_id


def watchdog(seq, p="[rank1]:", rank=1):
    return (f"{p}[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
            "milliseconds before timing out.")


def assert_candidates(ex, headline, expected):
    """The symptom first, then the expected candidates in order, each weaker, each saying what decides."""
    got = ids(ex)
    assert got[0] == headline, got
    assert got[1:1 + len(expected)] == expected, got
    top = ex.diagnoses[0]
    for fid in expected:
        d = by_id(ex, fid)
        assert d.confidence < top.confidence and d.confidence < SHOW_FULL, (fid, d.confidence)
        assert any("decide with:" in n for n in d.notes), (fid, d.notes)
        assert d.evidence, fid


def test_every_mode_and_signature_the_differential_names_exists():
    fms = catalog.failures()
    for fid in symptoms.SYMPTOMS:
        assert fid in fms
    for fid, name in symptoms.SIGNATURES_USED:
        assert name in {s.name for s in fms[fid].signatures}, (fid, name)


def test_a_timeout_in_a_later_collective_points_at_ranks_that_diverged():
    ex = explain([watchdog(4711)])
    assert_candidates(ex, "NCCL_COLLECTIVE_TIMEOUT", ["COLLECTIVE_MISMATCH_ACROSS_RANKS", "UNEVEN_INPUTS_HANG"])
    assert "collective #4711" in by_id(ex, "COLLECTIVE_MISMATCH_ACROSS_RANKS").notes[0]
    assert ex.diagnoses[0].confidence < LOW


def test_a_timeout_in_the_first_collective_on_one_node_points_at_the_gpu_peer_path():
    ex = explain([watchdog(1)])
    assert_candidates(ex, "NCCL_COLLECTIVE_TIMEOUT", ["NCCL_P2P_ACS_IOMMU_HANG", "FIREWALL_BLOCKS_PORTS"])
    assert "NCCL_P2P_DISABLE=1" in by_id(ex, "NCCL_P2P_ACS_IOMMU_HANG").notes[0]
    assert "COLLECTIVE_MISMATCH_ACROSS_RANKS" not in ids(ex)


def test_a_timeout_in_the_first_collective_across_nodes_points_at_the_network_between_them():
    ex = explain([watchdog(1, "node1: [rank0]:", 0), watchdog(1, "node2: [rank8]:", 8)])
    assert_candidates(ex, "NCCL_COLLECTIVE_TIMEOUT", ["FIREWALL_BLOCKS_PORTS", "NCCL_WRONG_INTERFACE_AUTOSELECTED"])
    assert "2 hosts" in by_id(ex, "FIREWALL_BLOCKS_PORTS").notes[0]


def test_a_decided_cause_leaves_no_candidates_under_the_timeout():
    ex = explain(["node1:1234:1300 [1] init.cc:1192 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on "
                  "CUDA device 2000", watchdog(4711)])
    assert ids(ex)[0] == "DUPLICATE_GPU_PER_RANK"
    assert not {"COLLECTIVE_MISMATCH_ACROSS_RANKS", "UNEVEN_INPUTS_HANG"} & set(ids(ex)), ids(ex)


def test_uneven_sequence_numbers_are_not_named_twice():
    # rules.py names UNEVEN_INPUTS_HANG from the different SeqNums; the differential does not add its own weight
    ex = explain([watchdog(100, "[rank0]:", 0), watchdog(101, "[rank1]:", 1)])
    uneven = by_id(ex, "UNEVEN_INPUTS_HANG")
    assert not any("ran out of batches" in n for n in uneven.notes), uneven.notes


def test_a_hung_watchdog_lists_the_collective_behind_it_and_a_gpu_that_stopped_answering():
    ex = explain(["[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be "
                  "terminated after dumping debug info. workMetaList_.size()=103"])
    assert_candidates(ex, "NCCL_WATCHDOG_HUNG", ["NCCL_COLLECTIVE_TIMEOUT", "GPU_HARDWARE_FAULT"])
    # the log names no cause: the hang is named as what happened (the dev threads whose log rested on this line
    # found nothing behind it: calibration.TALLY), low confidence, the candidates behind it listed
    assert SHOW_FULL <= ex.diagnoses[0].confidence < LOW


def test_sigabrt_points_at_the_watchdog_abort_and_sigsegv_at_a_native_library():
    abrt = explain(["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 "
                    "(pid: 5012) of binary: /usr/bin/python3"])
    assert_candidates(abrt, "WORKER_NATIVE_CRASH", ["NCCL_COLLECTIVE_TIMEOUT", "CUDA_KERNEL_ERROR"])
    segv = explain(["ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -11) local_rank: 1 "
                    "(pid: 5013) of binary: /usr/bin/python3",
                    "  traceback : Signal 11 (SIGSEGV) received by PID 5013"])
    assert_candidates(segv, "WORKER_NATIVE_CRASH", ["NCCL_LIBRARY_CONFLICT"])
    assert "NCCL_COLLECTIVE_TIMEOUT" not in ids(segv)


def test_a_rendezvous_timeout_lists_run_ids_that_differ_and_a_store_nobody_reached():
    ex = explain(["  run_id           : 9f2b4d7c",
                  "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"])
    assert_candidates(ex, "RDZV_NODES_MISSING", ["RDZV_ID_MISMATCH"])
    assert "9f2b4d7c" in by_id(ex, "RDZV_ID_MISMATCH").notes[0]
    # STANDALONE_WITH_MULTINODE's own weak signature reads the same line; the store candidate comes after it
    assert "RDZV_HOST_NOT_SELF_RECOGNIZED" in ids(ex)[:4], ids(ex)


def test_a_gloo_peer_that_closed_its_connection_lists_a_silent_kill_and_a_shorter_loop():
    ex = explain(["[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                  "peer [10.0.0.2]:32131"])
    assert_candidates(ex, "GLOO_PEER_EXITED", ["HOST_OOM_SIGKILL", "UNEVEN_INPUTS_HANG"])


def test_ncclremoteerror_is_not_given_the_local_system_error_candidates():
    ex = explain(["[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                  "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.19.3",
                  "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                  "prematurely."])
    assert ids(ex)[0] == "IB_FABRIC_FAULT", ids(ex)
    assert "HOST_OOM_SIGKILL" in ids(ex)[:3], ids(ex)
    assert "NCCL_SHM_TOO_SMALL" not in ids(ex), ids(ex)


def test_no_route_to_the_store_names_an_unreachable_endpoint_beside_a_rejecting_firewall():
    ex = explain(["trainer-2: torch.distributed.DistNetworkError: The client socket has failed to connect to any "
                  "network address of (192.168.121.122, 1040). The client socket has failed to connect to "
                  "192.168.121.122:1040 (errno: 113 - No route to host)."])
    # both readings, the address first: the threads found it 2 times and the firewall 0 (logscan/calibration.py ORDER)
    assert ids(ex)[:2] == ["RDZV_ENDPOINT_UNREACHABLE", "FIREWALL_BLOCKS_PORTS"], ids(ex)
    assert all(d.confidence < LOW for d in ex.diagnoses)
    assert "ip route get" in by_id(ex, "RDZV_ENDPOINT_UNREACHABLE").notes[0]


def test_a_lookup_of_a_string_that_is_no_host_name_is_a_malformed_address():
    ex = explain(["9.91.4.251: [W socket.cpp:601] [c10d] The IPv6 network addresses of (/root/cuda11.8.bashrc, 45458) "
                  "cannot be retrieved (gai error: -3 - Temporary failure in name resolution)."])
    assert ids(ex)[0] == "MASTER_ADDR_MALFORMED" and ex.diagnoses[0].confidence >= LOW, ids(ex)
    assert "/root/cuda11.8.bashrc" in ex.diagnoses[0].notes[0]
    # a real host name, an IPv4 or an IPv6 literal is never called malformed by this rule
    for name in ("gpu-node-7", "job-01k72wn5f8waqw7d81mfggagn4.internal", "10.1.0.4", "fd00::1", "node_3"):
        ex = explain([f"[W socket.cpp:601] [c10d] The IPv6 network addresses of ({name}, 29500) cannot be retrieved "
                      "(gai error: -2 - Name or service not known)."])
        assert "MASTER_ADDR_MALFORMED" not in ids(ex), (name, ids(ex))


def test_a_resolver_that_did_not_answer_is_more_than_the_ipv6_only_warning():
    line = ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (gpu-node-7, 53821) cannot be retrieved "
            "(gai error: {code})")
    again = explain([line.format(code="-3 - Temporary failure in name resolution")])
    noname = explain([line.format(code="-2 - Name or service not known")])
    assert ids(again)[0] == ids(noname)[0] == "HOSTNAME_UNRESOLVABLE"
    # EAI_AGAIN: shown in full, still low confidence; EAI_NONAME alone may be the IPv6-only artefact: shown below it
    # (dev counts in rules.lookup_warning_only)
    assert SHOW_FULL <= again.diagnoses[0].confidence < LOW
    assert SHOW_FULL <= noname.diagnoses[0].confidence < again.diagnoses[0].confidence
    assert "EAI_AGAIN" in " ".join(again.diagnoses[0].notes)


def test_the_text_shows_the_symptom_then_each_candidate_with_why_and_what_decides():
    text = render_text(explain([watchdog(4711)]))
    assert text.index("1. NCCL_COLLECTIVE_TIMEOUT") < text.index("weaker alternative: COLLECTIVE_MISMATCH_ACROSS_RANKS")
    alt = text[text.index("weaker alternative: COLLECTIVE_MISMATCH_ACROSS_RANKS"):]
    assert "why:" in alt and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in alt and "evidence: line 1:" in alt


def test_two_ranks_on_one_gpu_lists_more_processes_than_gpus_behind_it():
    ex = explain(["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL."
                  "cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3",
                  "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                  "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000"])
    assert ids(ex)[:2] == ["DUPLICATE_GPU_PER_RANK", "NPROC_EXCEEDS_GPUS"], ids(ex)
    assert ex.diagnoses[0].confidence >= LOW > ex.diagnoses[1].confidence
    assert "nvidia-smi -L" in ex.diagnoses[1].notes[0]


def test_a_store_timeout_to_a_loopback_address_is_not_blamed_on_a_firewall_between_nodes():
    line = ("TimeoutError: The client socket has timed out after 1800s while trying to connect to ({host}, 48391).")
    loop = explain([line.format(host="127.0.0.1")])
    remote = explain([line.format(host="10.1.0.4")])
    assert by_id(loop, "FIREWALL_BLOCKS_PORTS").confidence < SHOW_FULL <= by_id(remote, "FIREWALL_BLOCKS_PORTS").confidence
    assert "loopback" in " ".join(by_id(loop, "FIREWALL_BLOCKS_PORTS").notes)


def test_single_address_warnings_of_a_name_with_nothing_failing_after_them_are_not_a_diagnosis():
    attempt = ("[W926 21:34:49.000000000 socket.cpp:697] [c10d] The client socket has failed to connect to "
               "[{host}]:50656 (system error: 10049 - The requested address is not valid in its context.).")
    alone = explain([attempt.format(host="LAPTOP-TF2BILCG")])
    assert ids(alone) == ["WINDOWS_HOSTS_FILE_REVERSE_NAME"] and alone.diagnoses[0].confidence < SHOW_FULL
    assert "next address" in " ".join(alone.diagnoses[0].notes)
    # c10d's own error after the attempts (every address failed), or a traceback: the mode stands as before
    failed = explain([attempt.format(host="LAPTOP-TF2BILCG"), "[E socket.cpp:610] [c10d] The client socket has "
                      "failed to connect to any network address of (LAPTOP-TF2BILCG, 50656)."])
    assert failed.diagnoses[0].confidence >= LOW, ids(failed)
    # an address literal has no next address: its failed attempt is the failure
    literal = explain(["[W427 01:04:16.149509694 socket.cpp:752] [c10d] The client socket has failed to connect to "
                       "[::ffff:198.18.0.1]:3254 (errno: 110 - Connection timed out)."])
    assert literal.diagnoses[0].confidence >= SHOW_FULL, [(d.failure.id, d.confidence) for d in literal.diagnoses]


def test_ib_retry_exceeded_lists_the_fabric_beside_the_gid_index_and_not_dev_shm():
    ex = explain(["PHLRR4036:24141:24296 [2] ib_plugin.c:978 NCCL WARN NET/IB : Got completion from peer "
                  "10.226.98.98<48598> with error 12, opcode 0, len 0, vendor err 129",
                  "terminate called after throwing an instance of 'c10::DistBackendError'",
                  "  what():  NCCL error: unhandled system error, NCCL version 2.14.3"])
    assert ids(ex)[:2] == ["IB_ROCE_GID_MISMATCH", "IB_FABRIC_FAULT"], ids(ex)
    assert "ibv_devinfo" in by_id(ex, "IB_FABRIC_FAULT").notes[0]
    # the system error follows the peer's failure: one node's /dev/shm is no candidate for it
    assert "NCCL_SHM_TOO_SMALL" not in ids(ex), ids(ex)
    assert "InfiniBand transport failed with a peer" in " ".join(by_id(ex, "NCCL_SYSTEM_ERROR").notes)


def test_a_store_wait_that_timed_out_is_not_read_as_a_rendezvous_id_mismatch():
    ex = explain(["torch.distributed.DistBackendError: [4] is setting up NCCL communicator and retrieving ncclUniqueId "
                  "from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"])
    assert "RDZV_ID_MISMATCH" not in ids(ex), ids(ex)


def test_an_old_nccl_refused_connect_is_a_connection_not_dev_shm():
    # NCCL 2.0-2.3 word the socket failure without an address (include/socket.h)
    ex = explain(["node1 [0] include/socket.h:185 WARN Call to connect failed : Connection refused",
                  "NCCL failure train.cu:110 'unhandled system error'"])
    assert ids(ex)[:2] == ["NCCL_SYSTEM_ERROR", "NCCL_WRONG_INTERFACE_AUTOSELECTED"], ids(ex)
    assert "NCCL_SHM_TOO_SMALL" not in ids(ex), ids(ex)

"""Ranking: the earliest specific error is the cause, collective timeouts and dead peers are its
consequences; rules that read across lines; what the explanation says about who failed."""
import io

from ddpdoctor.logscan import explain_stream

WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
            "milliseconds before timing out.")


def explain(text: str):
    return explain_stream(io.BytesIO(text.encode()), "t")


def ids(text: str):
    return [d.failure.id for d in explain(text).diagnoses]


def test_watchdog_alone_is_a_consequence_without_a_cause():
    ex = explain(WATCHDOG.format(r=1, seq=5, op="ALLREDUCE"))
    assert [d.failure.id for d in ex.diagnoses][0] == "NCCL_COLLECTIVE_TIMEOUT"
    assert ex.diagnoses[0].consequence_of is None
    # what may have caused it follows as weaker candidates (logscan/symptoms.py), never above it
    assert all(d.confidence < ex.diagnoses[0].confidence for d in ex.diagnoses[1:])


def test_earlier_specific_error_on_another_rank_is_the_cause_and_the_watchdog_its_consequence():
    log = "\n".join([
        "step 100 loss 1.2",
        "[rank2]:node1:214:392 [2] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9)",
        WATCHDOG.format(r=0, seq=101, op="ALLREDUCE"),
        WATCHDOG.format(r=1, seq=101, op="ALLREDUCE"),
    ])
    ex = explain(log)
    first, *rest = ex.diagnoses
    assert first.failure.id == "NCCL_SHM_TOO_SMALL"
    assert first.origin == {"host": "node1", "rank": 2}
    wd = next(d for d in rest if d.failure.id == "NCCL_COLLECTIVE_TIMEOUT")
    assert wd.consequence_of == "NCCL_SHM_TOO_SMALL" and wd.confidence < first.confidence


def test_watchdogs_at_different_sequence_numbers_point_at_uneven_inputs():
    log = "\n".join(WATCHDOG.format(r=r, seq=seq, op="ALLREDUCE") for r, seq in ((0, 8811), (1, 8811), (2, 8790)))
    assert ids(log)[0] == "UNEVEN_INPUTS_HANG"


def test_watchdogs_in_different_collectives_point_at_a_collective_mismatch():
    log = WATCHDOG.format(r=0, seq=204, op="ALLREDUCE") + "\n" + WATCHDOG.format(r=1, seq=205, op="BROADCAST")
    assert ids(log)[0] == "COLLECTIVE_MISMATCH_ACROSS_RANKS"


def test_connect_timeout_to_a_name_that_does_not_resolve_is_a_dns_failure():
    log = "\n".join([
        "[W socket.cpp:764] [c10d] The IPv6 network addresses of (node1, 34729) cannot be retrieved "
        "(gai error: -2 - Name or service not known).",
        "[E socket.cpp:1028] [c10d] The client socket has timed out after 10000ms while trying to connect to "
        "(node1, 34729).",
    ])
    ex = explain(log)
    assert ex.diagnoses[0].failure.id == "HOSTNAME_UNRESOLVABLE"
    assert "FIREWALL_BLOCKS_PORTS" not in [d.failure.id for d in ex.diagnoses]
    assert any("does not resolve" in n for n in ex.diagnoses[0].notes)


def test_timeout_on_the_port_torchrun_handed_out_means_other_ports_are_blocked():
    # the rendezvous on 29400 worked (its endpoint is in the log), then the store on the port it handed out timed out
    line = ("[E socket.cpp:1028] [c10d] The client socket has timed out after 10000ms while trying to connect to "
            "(node1, 45705).")
    log = "  rdzv_endpoint    : node1:29400\n" + line
    assert ids(log)[0] == "FIREWALL_BLOCKS_PORTS"
    log29500 = log.replace("45705", "29500")
    assert ids(log29500)[0] == "RDZV_ENDPOINT_UNREACHABLE"
    # without a rendezvous in the log a high port is just the port the job was given (rules.port_after_rendezvous)
    assert ids(line)[0] == "RDZV_ENDPOINT_UNREACHABLE"


def test_info_lines_alone_are_not_a_diagnosis():
    clean = "node1:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\nstep 1 loss 0.5\n"
    assert ids(clean) == []
    failed = clean + "node1:1:1 [0] NCCL INFO Call to connect returned Connection timed out, retrying\n"
    assert ids(failed)[0] == "NCCL_WRONG_INTERFACE_AUTOSELECTED"


def test_two_patterns_on_one_line_are_one_piece_of_evidence():
    one = ("[c10d] The client socket has failed to connect to [host]:29500 (system error: 10049 - The requested "
           "address is not valid in its context.).")
    d = explain(one).diagnoses[0]
    assert d.failure.id == "WINDOWS_HOSTS_FILE_REVERSE_NAME" and d.confidence <= 0.9


def test_different_run_ids_across_nodes_mean_different_rendezvous():
    log = "\n".join([
        "node1: [WARNING] config has no run_id, generated a random run_id: 3f4bd1f3",
        "node2: [WARNING] config has no run_id, generated a random run_id: 0c9a0e47",
        "node1: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    ])
    d = explain(log).diagnoses[0]
    assert d.failure.id == "RDZV_ID_MISMATCH" and d.confidence >= 0.85
    assert any("different run ids" in n for n in d.notes)


def test_torchrun_summary_names_the_first_failure():
    log = "\n".join([
        "Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-21_05:40:36",
        "  host      : node7", "  rank      : 5 (local_rank: 1)", "  exitcode  : -9 (pid: 22116)",
        "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 22116",
    ])
    ex = explain(log)
    assert ex.first_failure == {"line": 1, "host": "node7", "rank": 5, "local_rank": 1, "exitcode": -9}
    assert ex.diagnoses[0].failure.id == "HOST_OOM_SIGKILL"


def test_confirm_command_uses_the_master_from_the_log_only_when_valid():
    good = ("[E socket.cpp:1028] [c10d] The client socket has timed out after 60000ms while trying to connect to "
            "(trainer-7, 29400).")
    ex = explain(good)
    assert (ex.confirm.master, ex.confirm.port) == ("trainer-7", "29400")
    bad = good.replace("trainer-7", "$(reboot)")
    ex = explain(bad)
    assert ex.confirm.master == "<master>"


def test_unknown_log_says_so_and_points_at_the_first_error():
    ex = explain("epoch 1\nValueError: my dataset is empty\nepoch 2\n")
    assert ex.diagnoses == []
    assert ex.first_error.line == 2 and "my dataset is empty" in ex.first_error.text


def _example(failure_id: str, name: str) -> str:
    from ddpdoctor import catalog
    return next(s.example for s in catalog.get(failure_id).signatures if s.name == name)


def test_a_tie_between_unrelated_modes_is_said_and_not_decided_by_line_order():
    # Two specific errors of unrelated modes, equally strong: whichever the user pasted first must not
    # win on position alone, and the report says the log does not decide.
    a = _example("LAUNCHER_NOT_ON_PATH", "NOT_FOUND")
    b = _example("NCCL_SHM_TOO_SMALL", "POSIX_FALLOCATE_FAILED_NO_SPACE")
    orders = []
    for first, second in ((a, b), (b, a)):
        diags = explain_stream(io.BytesIO(f"{first}\n{second}\n".encode())).diagnoses
        top = diags[:2]
        assert {d.failure.id for d in top} == {"LAUNCHER_NOT_ON_PATH", "NCCL_SHM_TOO_SMALL"}
        assert any("does not decide" in n for n in top[0].notes)
        orders.append([d.failure.id for d in top])
    assert orders[0] == orders[1], "line order decided a tie between unrelated modes"


def test_kubernetes_markers_shift_an_unresolved_name_towards_dns_not_ready():
    lookup = "ValueError: host not found: Name or service not known\n"
    plain = [d.failure.id for d in explain_stream(io.BytesIO(lookup.encode())).diagnoses]
    on_k8s = explain_stream(io.BytesIO(("$ kubectl logs train-worker-0\n" + lookup).encode())).diagnoses
    assert plain[0] == "HOSTNAME_UNRESOLVABLE"
    assert on_k8s[0].failure.id == "K8S_DNS_NOT_READY" and any("Kubernetes" in n for n in on_k8s[0].notes)


def test_an_ipv6_only_lookup_warning_with_nothing_failing_after_it_is_not_a_diagnosis():
    # c10d looks up IPv6 first and then IPv4 (socket.cpp); a Mac's .local name has no IPv6 address
    warn = ("[W1014 16:41:26.522544000 socket.cpp:755] [c10d] The IPv6 network addresses of (Os-MacBook-Air.local, "
            "59319) cannot be retrieved (gai error: 8 - nodename nor servname provided, or not known).\n")
    ex = explain(warn)
    assert all(d.confidence < 0.35 for d in ex.diagnoses)
    assert "IPv4 attempt" in ex.diagnoses[0].notes[-1]
    # the same warning before an IPv4 failure, or the older wording without a family, stays the cause
    v4 = warn.replace("IPv6", "IPv4")
    assert explain(warn + v4).diagnoses[0].failure.id == "HOSTNAME_UNRESOLVABLE"
    assert explain(warn + v4).diagnoses[0].confidence >= 0.5
    old = "[W socket.cpp:401] [c10d] The network addresses of (node1, 29500) cannot be retrieved Name or service not known.\n"
    assert explain(old + "RuntimeError: connect() timed out.\n").diagnoses[0].failure.id == "HOSTNAME_UNRESOLVABLE"


def test_the_same_line_from_several_ranks_is_one_piece_of_evidence():
    line = ("[rank{r}]:[E318 07:39:53.79{r}630246 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=610, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600086 "
            "milliseconds before timing out.\n")
    d = explain("".join(line.format(r=r) for r in range(4))).diagnoses[0]
    assert d.failure.id == "NCCL_COLLECTIVE_TIMEOUT"
    assert len(d.evidence) == 1 and "the same line 4 times (ranks/hosts 0, 1, 2, 3)" in d.evidence[0].note


def test_a_store_barrier_with_more_workers_than_the_world_names_the_mismatch_and_fewer_does_not():
    line = ("Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 "
            "(world_size=4, worker_count={n}, timeout=0:30:00)\n")
    over = explain(line.format(n=8)).diagnoses[0]
    assert over.failure.id == "STORE_BARRIER_WORKER_COUNT_MISMATCH" and over.confidence >= 0.5
    assert "8 processes joined the store barrier of a group of 4" in over.notes[0]
    # three of four arrived: ranks still coming, a clue in a log that shows no failure is no diagnosis
    assert explain(line.format(n=3)).diagnoses == []


def test_a_rank_that_reports_zero_params_is_no_confident_model_mismatch():
    # DDP's count check (torch reducer.cpp verify_params_across_processes) read 0 from a rank: the all-gather
    # gave nothing back (threads end in P2P/transport fixes), so the mode is named with low confidence only;
    # a real difference in counts is named with confidence.
    from ddpdoctor.logscan.render import LOW
    msg = "RuntimeError: DDP expects same model across all ranks, but Rank 1 has {n} params, while rank 0 has inconsistent {m} params."
    zero = explain(msg.format(n=221, m=0)).diagnoses
    assert zero[0].failure.id == "DDP_MODEL_MISMATCH_ACROSS_RANKS" and zero[0].confidence < LOW
    real = explain(msg.format(n=4, m=2)).diagnoses
    assert real[0].failure.id == "DDP_MODEL_MISMATCH_ACROSS_RANKS" and real[0].confidence >= LOW


def test_sigterm_from_the_scheduler_is_not_a_terminal_hangup():
    # Only SIGHUP (1) is a closed session; the same agent line with 15 is a scheduler or a person stopping the job.
    log = ("WARNING:torch.distributed.elastic.agent.server.api:Received 15 death signal, shutting down workers\n"
           "torch.distributed.elastic.multiprocessing.api.SignalException: Process 812 got signal: 15\n")
    assert "LAUNCHER_HANGUP_SIGHUP" not in ids(log)
    assert ids(log.replace("15", "1"))[0] == "LAUNCHER_HANGUP_SIGHUP"

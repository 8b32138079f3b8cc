"""A generic symptom is not a final answer (issue 11 §2): NCCL's system/internal error, CUDA OOM and
`invalid device ordinal` get a differential of specific causes from the rest of the log; when the log
does not decide, the symptom stays the headline with low confidence and the candidates say what
would decide. Logs composed from the catalog's documented signatures and the wording of real pastes
(tests/corpus/dev), with the rank prefixes torchrun puts in front of lines."""
import json

from ddpdoctor import catalog
from ddpdoctor.logscan import differential
from ddpdoctor.logscan.render import LOW, render_text, to_dict
from logtext import explain

SYSERR = ("{p}torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
          "1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5")
INTERNAL_OLD = "{p}RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, internal error, NCCL version 2.7.8"
BARRIER_TB = [
    "{p}Traceback (most recent call last):",
    '{p}  File "/work/train.py", line 41, in <module>',
    "{p}    dist.barrier()",
    '{p}  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper',
    "{p}    return func(*args, **kwargs)",
    '{p}  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier',
    "{p}    work = default_pg.barrier(opts=opts)",
]


def ranked(ex):
    return [(d.failure.id, round(d.confidence, 2)) for d in ex.diagnoses]


def syserr_at_barrier(p="[rank1]: ", error=SYSERR):
    return [ln.format(p=p) for ln in BARRIER_TB] + [error.format(p=p)]


def test_the_signatures_the_differential_reads_exist():
    fms = catalog.failures()
    for fid, name in differential.SIGNATURES_USED:
        assert name in {s.name for s in fms[fid].signatures}, (fid, name)


def test_system_error_alone_stays_the_headline_with_low_confidence_and_candidates():
    ex = explain(syserr_at_barrier())
    top, *rest = ex.diagnoses
    assert top.failure.id == "NCCL_SYSTEM_ERROR" and top.confidence < LOW
    assert "barrier" in top.notes[0] and "NCCL_DEBUG=INFO" in top.notes[0]
    # one node as far as the log shows: /dev/shm is the first candidate, each weaker than the headline
    assert rest and rest[0].failure.id == "NCCL_SHM_TOO_SMALL", ranked(ex)
    assert all(d.confidence < top.confidence for d in rest)
    assert all(any("decide" in n for n in d.notes) for d in rest[:2]), [d.notes for d in rest]


def test_rank_prefixes_and_older_internal_error_wording_do_not_defeat_it():
    for prefix in ("[default0]:", "[rank3]: ", "node2: 3: "):
        ex = explain(syserr_at_barrier(prefix, INTERNAL_OLD))
        assert ex.diagnoses[0].failure.id == "NCCL_SYSTEM_ERROR", (prefix, ranked(ex))
        assert ex.diagnoses[0].confidence < LOW
        assert any("barrier" in n for n in ex.diagnoses[0].notes), prefix


def test_a_small_dev_shm_in_a_pasted_df_decides_it():
    log = ["$ df -h /dev/shm", "Filesystem      Size  Used Avail Use% Mounted on",
           "shm              64M     0   64M   0% /dev/shm"] + syserr_at_barrier("[default0]:")
    ex = explain(log)
    assert ex.diagnoses[0].failure.id == "NCCL_SHM_TOO_SMALL", ranked(ex)
    assert ex.diagnoses[0].confidence >= LOW
    sys = next(d for d in ex.diagnoses if d.failure.id == "NCCL_SYSTEM_ERROR")
    assert sys.consequence_of == "NCCL_SHM_TOO_SMALL"


def test_two_ranks_on_one_gpu_in_nccl_info_decide_it():
    log = ["node1:301:301 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START",
           "node1:302:302 [0] NCCL INFO comm 0x55e0 rank 1 nranks 2 cudaDev 0 busId 1000 - Init START"]
    ex = explain(log + syserr_at_barrier())
    assert ex.diagnoses[0].failure.id == "DUPLICATE_GPU_PER_RANK", ranked(ex)
    assert "ranks 0, 1 on node1" in ex.diagnoses[0].notes[0]


def test_different_gpus_per_rank_raise_nothing_about_sharing():
    log = ["node1:301:301 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START",
           "node1:302:302 [1] NCCL INFO comm 0x55e0 rank 1 nranks 2 cudaDev 1 busId 2000 - Init START"]
    ex = explain(log + syserr_at_barrier())
    assert "DUPLICATE_GPU_PER_RANK" not in [d.failure.id for d in ex.diagnoses]
    assert ex.diagnoses[0].confidence < LOW


def test_a_failed_socket_connect_between_nodes_points_at_the_network_not_at_shm():
    log = ["node1:301:301 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
           "node2:311:311 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
           "node2:311:400 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.1<45678> failed : "
           "Software caused connection abort"] + syserr_at_barrier("node2: [rank1]: ")
    ex = explain(log)
    ids = [d.failure.id for d in ex.diagnoses]
    assert ids[0] == "FIREWALL_BLOCKS_PORTS", ranked(ex)
    assert "NCCL_WRONG_INTERFACE_AUTOSELECTED" in ids[:3]
    assert "NCCL_SHM_TOO_SMALL" not in ids[:3]


def test_an_info_line_that_names_the_cause_wins_over_the_differential():
    log = ["node1:301:301 [0] net_socket.cc:47 NCCL WARN NET/Socket : No usable listening interface found"]
    ex = explain(log + syserr_at_barrier())
    assert ex.diagnoses[0].failure.id == "NCCL_SOCKET_IFNAME_NOT_FOUND", ranked(ex)
    log = ["node1:301:301 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_reg_mr failed"]
    assert explain(log + syserr_at_barrier()).diagnoses[0].failure.id == "IB_MEMLOCK_LIMIT"


OOM_NEW = ("{p}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a total capacity of "
           "79.15 GiB of which {free} is free. Including non-PyTorch memory, this process has {own} memory in use. Of "
           "the allocated memory 1.0 GiB is allocated by PyTorch, and 12.00 MiB is reserved by PyTorch but unallocated.")


def test_oom_of_a_process_that_holds_the_gpu_itself_is_the_model_not_another_rank():
    ex = explain([OOM_NEW.format(p="[rank1]: ", tried="2.00 GiB", gpu=1, free="1.20 GiB", own="77.90 GiB")])
    top = ex.diagnoses[0]
    assert top.failure.id == "GPU_OUT_OF_MEMORY" and top.confidence >= LOW
    assert any("this process itself holds" in n for n in top.notes)
    assert "GPU0_EXTRA_MEMORY" not in [d.failure.id for d in ex.diagnoses]


def test_oom_on_a_full_gpu_this_process_barely_uses_is_other_ranks_memory():
    ex = explain([OOM_NEW.format(p="[rank2]: ", tried="20.00 MiB", gpu=0, free="3.94 MiB", own="1.20 GiB")])
    ids = [d.failure.id for d in ex.diagnoses]
    assert ids[0] == "GPU0_EXTRA_MEMORY", ranked(ex)
    assert "GPU_OUT_OF_MEMORY" in ids[:3]


def test_oom_inside_torch_load_or_the_ddp_constructor_is_memory_on_one_shared_gpu():
    load = ["[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "/work/train.py", line 12, in <module>',
            "[rank3]:     state = torch.load(args.ckpt)",
            '[rank3]:   File "/usr/lib/python3/site-packages/torch/serialization.py", line 1025, in load',
            "[rank3]: RuntimeError: CUDA error: out of memory"]
    ex = explain(load)
    assert ex.diagnoses[0].failure.id == "GPU0_EXTRA_MEMORY", ranked(ex)
    assert "torch.load" in ex.diagnoses[0].notes[0]
    ddp = ['[default1]:  File "C:\\Python311\\Lib\\site-packages\\torch\\nn\\parallel\\distributed.py", line 795, in __init__',
           "[default1]:    _verify_param_shape_across_processes(self.process_group, parameters)",
           "[default1]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 10.75 GiB "
           "total capacity; 0.30 GiB already allocated; 12.00 MiB free; 0.32 GiB reserved in total by PyTorch)"]
    assert explain(ddp).diagnoses[0].failure.id == "GPU0_EXTRA_MEMORY"


def test_a_plain_oom_keeps_its_name_and_says_what_would_decide():
    ex = explain(["RuntimeError: CUDA error: out of memory"])
    assert [d.failure.id for d in ex.diagnoses][:1] == ["GPU_OUT_OF_MEMORY"]
    assert any("nvidia-smi" in n for n in ex.diagnoses[0].notes)


ORDINAL = "{p}RuntimeError: CUDA error: invalid device ordinal"


def test_invalid_ordinal_alone_is_a_low_confidence_guess_with_the_other_reading_next():
    ex = explain([ORDINAL.format(p="[rank1]: ")])
    assert [d.failure.id for d in ex.diagnoses][:2] == ["NPROC_EXCEEDS_GPUS", "GLOBAL_RANK_USED_AS_DEVICE"]
    assert ex.diagnoses[0].confidence < LOW and "nvidia-smi -L" in ex.diagnoses[0].notes[0]


def test_invalid_ordinal_past_the_visible_gpus_is_more_ranks_than_gpus():
    log = ["+ CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=4 train.py"] + \
        [ORDINAL.format(p=f"[rank{r}]: ") for r in (2, 3)]
    ex = explain(log)
    assert ex.diagnoses[0].failure.id == "NPROC_EXCEEDS_GPUS", ranked(ex)
    assert any("CUDA_VISIBLE_DEVICES gives 2" in n for n in ex.diagnoses[0].notes)


def test_invalid_ordinal_on_a_global_rank_of_a_second_node_is_the_global_rank_used_as_device():
    log = [ORDINAL.format(p="[rank9]: "), "Root Cause (first observed failure):", "[0]:",
           "  time      : 2024-05-01_10:00:00", "  host      : node2", "  rank      : 9 (local_rank: 1)",
           "  exitcode  : 1 (pid: 4242)"]
    ex = explain(log)
    assert ex.diagnoses[0].failure.id == "GLOBAL_RANK_USED_AS_DEVICE", ranked(ex)


def test_a_weak_best_diagnosis_shows_two_weaker_alternatives_with_what_decides():
    ex = explain(syserr_at_barrier())
    text = render_text(ex)
    assert "(low confidence)" in text and "generic error, not its cause" in text
    assert text.count("weaker alternative:") == 2
    assert "df -h /dev/shm" in text
    d = to_dict(ex)["diagnoses"]
    assert d[0]["low_confidence"] is True
    json.dumps(d)


def test_a_confident_diagnosis_shows_no_weaker_alternatives():
    log = ["node1:214:392 [2] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9), error: No space left on device (28)"]
    text = render_text(explain(log + syserr_at_barrier()))
    assert "weaker alternative" not in text and "(low confidence)" not in text.split("\n\n")[1]


def test_context_lines_alone_are_not_a_diagnosis():
    log = ["shm              64M     0   64M   0% /dev/shm", "CUDA_VISIBLE_DEVICES=0,1",
           "node1:301:301 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
           "node1:302:302 [0] NCCL INFO comm 0x55e0 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
           '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier',
           "epoch 1 loss 0.3"]
    assert explain(log).diagnoses == []


def test_a_bare_connection_refused_is_a_low_confidence_list_not_an_answer():
    ex = explain(["[rank1]: ConnectionRefusedError: [Errno 111] Connection refused"])
    ids = [d.failure.id for d in ex.diagnoses]
    assert ids[:2] == ["RDZV_ENDPOINT_UNREACHABLE", "FIREWALL_BLOCKS_PORTS"], ranked(ex)
    assert all(d.confidence < 0.35 for d in ex.diagnoses)
    text = render_text(ex)
    assert "No line in this log points clearly at a cause" in text and text.count("candidate:") == 3 and "weaker alternative" not in text
    assert "nc -zv" in text


def test_a_reset_while_reading_the_store_points_at_the_store_host_having_exited():
    ex = explain(["[default0]:RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
                  "via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer"])
    assert ex.diagnoses[0].failure.id == "RDZV_STORE_HOST_EXITED" and ex.diagnoses[0].confidence < LOW
    assert "HOST_OOM_SIGKILL" in [d.failure.id for d in ex.diagnoses][:3]


def test_a_specific_connect_signature_is_not_diluted_by_the_bare_connect_differential():
    ex = explain(["[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29400 "
                  "(errno: 111 - Connection refused)."])
    # one diagnosis, no list of bare-connect candidates; refused is what a wrong address, a store not started
    # yet and a rejecting firewall all print, so it is named with low confidence (issue 23)
    assert ranked(ex) == [("RDZV_ENDPOINT_UNREACHABLE", 0.45)]
    assert any("what would decide" in n for n in ex.diagnoses[0].notes)


def test_a_container_id_hostname_on_one_node_raises_dev_shm_and_drops_the_network():
    log = ["3f2a9c1b7d4e:301:301 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.2<0>"] + \
        syserr_at_barrier("3f2a9c1b7d4e: [rank1]: ")
    ex = explain(log)
    top, alt = ex.diagnoses[:2]
    assert top.failure.id == "NCCL_SYSTEM_ERROR" and top.confidence < LOW, ranked(ex)
    assert alt.failure.id == "NCCL_SHM_TOO_SMALL" and "container id" in alt.notes[0]
    assert "FIREWALL_BLOCKS_PORTS" not in [d.failure.id for d in ex.diagnoses]


def test_ranks_that_each_guessed_the_same_gpu_for_barrier_raise_a_shared_gpu_but_do_not_decide():
    w = ("[rank{r}]:[W ProcessGroupNCCL.cpp:4115] [PG 0 Rank {r}]  using GPU 0 to perform barrier as devices used "
         "by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is "
         "incorrect.")
    ex = explain([w.format(r=0), w.format(r=1)] + syserr_at_barrier())
    ids = [d.failure.id for d in ex.diagnoses]
    assert ids[0] == "NCCL_SYSTEM_ERROR" and ex.diagnoses[0].confidence < LOW, ranked(ex)
    assert "DUPLICATE_GPU_PER_RANK" in ids[1:3], ranked(ex)


def test_the_infiniband_transport_raises_memlock_at_init():
    log = ["node1:301:301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>"]
    ex = explain(log + syserr_at_barrier())
    assert "IB_MEMLOCK_LIMIT" in [d.failure.id for d in ex.diagnoses][1:4], ranked(ex)
    assert ex.diagnoses[0].confidence < LOW

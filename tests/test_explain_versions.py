"""Issue 23, batch 7 work: the facts a person reads around a line decide what it means.

A symptom that a later NCCL release fixed names NCCL_RELEASE_BUG only as far as the log's `NCCL version` allows;
the DeepSpeed launcher's teardown says a worker died, not why; a log pasted into Markdown reads the same as the
plain one."""
import io

from ddpdoctor.logscan import explain_stream

TOPO = b"node1:21744:21790 [0] graph/xml.h:77 NCCL WARN Attribute arch of node cpu not found\n"
NET_ID = b"graph/topo.h:230 NCCL WARN Could not find NET with id 0\n"


def diagnoses(data: bytes):
    return {d.failure.id: d for d in explain_stream(io.BytesIO(data), "test").diagnoses}


def test_a_symptom_fixed_in_a_later_release_names_the_release_when_the_log_s_nccl_is_older():
    d = diagnoses(b"NCCL version 2.7.8+cuda11.0\n" + TOPO)["NCCL_RELEASE_BUG"]
    assert d.confidence >= 0.5                                    # named in the release notes: decisive
    assert any("2.8.3" in n for n in d.notes)


def test_the_same_symptom_with_the_fixed_release_is_not_the_release_bug():
    d = diagnoses(b"node1:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\n" + TOPO).get("NCCL_RELEASE_BUG")
    assert d is None or d.confidence < 0.35                       # a hand-written topology file, more likely


def test_without_a_version_the_release_bug_is_only_possible_and_says_what_decides():
    d = diagnoses(TOPO)["NCCL_RELEASE_BUG"]
    assert d.confidence < 0.5
    assert any("NCCL version" in n for n in d.notes)


def test_a_vague_fix_stays_low_confidence_even_with_an_old_version():
    data = NET_ID + b"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3376, internal error " \
                    b"- please report this issue to the NCCL developers, NCCL version 2.25.1\n"
    ids = list(diagnoses(data))
    d = diagnoses(data)["NCCL_RELEASE_BUG"]
    assert ids[0] == "NCCL_RELEASE_BUG" and 0.35 <= d.confidence < 0.5
    fixed = diagnoses(NET_ID + b"NCCL version 2.27.3+cuda12.9\n").get("NCCL_RELEASE_BUG")
    assert fixed is None or fixed.confidence < 0.35


TEARDOWN = (b"[2023-09-10 11:45:59,207] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6293\n"
            b"[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 6294\n")


def test_a_deepspeed_teardown_without_traceback_makes_the_oom_killer_possible_never_certain():
    ds = diagnoses(TEARDOWN)
    assert list(ds)[0] == "HOST_OOM_SIGKILL" and ds["HOST_OOM_SIGKILL"].confidence < 0.5
    assert ds["DEEPSPEED_LAUNCHER_TEARDOWN"].confidence <= 0.3    # says what happened, not why


def test_a_deepspeed_teardown_after_a_traceback_or_a_signal_to_the_launcher_is_not_the_oom_killer():
    tb = b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad batch\n'
    assert "HOST_OOM_SIGKILL" not in diagnoses(tb + TEARDOWN)
    sig = b"[2023-04-14 13:11:27,885] [INFO] [launch.py:319:sigkill_handler] Main process received SIGTERM, exiting\n"
    ds = diagnoses(TEARDOWN + sig)
    assert "HOST_OOM_SIGKILL" not in ds and list(ds)[0] == "DEEPSPEED_LAUNCHER_TEARDOWN"


def test_a_line_pasted_with_markdown_bold_and_backticks_reads_as_the_plain_line():
    plain = (b"[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation "
             b"timeout: WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, NumelIn=8080, NumelOut=129280, "
             b"Timeout(ms)=600000) ran for 600049 milliseconds before timing out.\n")
    marked = b"`" + plain.replace(b"Watchdog", b"**Watchdog").replace(b"timeout:", b"timeout:**").rstrip() + b"`\n"
    # the same answer either way: the timeout first (its candidates after it, logscan/symptoms.py)
    assert list(diagnoses(marked)) == list(diagnoses(plain)) and list(diagnoses(plain))[0] == "NCCL_COLLECTIVE_TIMEOUT"


def test_a_message_wrapped_in_the_middle_of_a_number_is_joined():
    wrapped = (b"[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective "
               b"operation timeout: WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, NumelIn=8080, NumelOut=1\n"
               b"29280, Timeout(ms)=600000) ran for 600049 milliseconds before timing out.\n")
    assert "NCCL_COLLECTIVE_TIMEOUT" in diagnoses(wrapped)


def test_colossalai_run_failing_on_a_remote_host_names_ssh_but_not_on_the_local_one():
    remote = (b"Error: failed to run torchrun --nproc_per_node=4 --nnodes=2 --node_rank=1 train.py on gpu-1648, "
              b"is localhost: False, exception: No authentication methods available\n")
    assert diagnoses(remote)["LAUNCHER_SSH_UNREACHABLE"].confidence >= 0.5
    local = b"Error: failed to run torchrun --nproc_per_node=4 --nnodes=1 --node_rank=0 train.py on 127.0.0.1\n"
    assert "LAUNCHER_SSH_UNREACHABLE" not in diagnoses(local)
    trained = (b"Error: failed to run torchrun --nnodes=2 --node_rank=1 train.py on gpu-2, is localhost: False, "
               b"exception: Encountered a bad command exit code!\n")
    assert "LAUNCHER_SSH_UNREACHABLE" not in diagnoses(trained)


def test_a_traceback_cut_inside_the_env_rendezvous_names_a_script_started_without_a_launcher():
    cut = (b'Traceback (most recent call last):\n'
           b'  File "D:\\proj\\main.py", line 31, in main\n'
           b"    dist.init_process_group(backend='gloo')\n"
           b'  File "C:\\envs\\x\\Lib\\site-packages\\torch\\distributed\\rendezvous.py", line 231, in _env_rendezvous_handler\n'
           b'    rank = int(_get_env_or_raise("RANK"))\n'
           b'  File "C:\\envs\\x\\Lib\\site-packages\\torch\\distributed\\rendezvous.py", line 216, in _get_env_or_raise\n'
           b'    raise _env_error(env_var)\n')
    ds = diagnoses(cut)
    assert list(ds)[0] == "SCRIPT_WITHOUT_LAUNCHER" and 0.35 <= ds["SCRIPT_WITHOUT_LAUNCHER"].confidence < 0.5


ORDINAL = b"RuntimeError: cuda runtime error (101) : invalid device ordinal at /pytorch/torch/csrc/cuda/Module.cpp:59\n"


def test_a_launch_line_with_more_processes_than_visible_gpus_decides_an_invalid_device_ordinal():
    launch = b"CUDA_VISIBLE_DEVICES=1,2 python -m torch.distributed.launch --nproc_per_node=4 train.py\n"
    ds = diagnoses(launch + ORDINAL)
    assert list(ds)[0] == "NPROC_EXCEEDS_GPUS" and ds["NPROC_EXCEEDS_GPUS"].confidence >= 0.5
    enough = b"CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc-per-node=4 train.py\n"
    assert diagnoses(enough + ORDINAL).get("NPROC_EXCEEDS_GPUS") is None \
        or diagnoses(enough + ORDINAL)["NPROC_EXCEEDS_GPUS"].confidence < 0.5


def test_nccl_built_for_a_newer_cuda_major_than_the_driver_supports_is_a_driver_too_old():
    fail = (b"torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled cuda error (run with "
            b"NCCL_DEBUG=INFO for details), NCCL version 2.18.5\n")
    old = b"node1:1354:1354 [0] NCCL INFO cudaDriverVersion 11040\nNCCL version 2.18.5+cuda12.1\n"
    ds = diagnoses(old + fail)
    assert list(ds)[0] == "CUDA_DRIVER_TOO_OLD" and ds["CUDA_DRIVER_TOO_OLD"].confidence >= 0.5
    same_major = b"node1:1354:1354 [0] NCCL INFO cudaDriverVersion 12020\nNCCL version 2.18.5+cuda12.1\n"
    assert "CUDA_DRIVER_TOO_OLD" not in diagnoses(same_major + fail)
    assert "CUDA_DRIVER_TOO_OLD" not in diagnoses(old)        # no failure in the log: a fact, not a diagnosis


def test_a_master_name_of_digits_is_read_as_an_address_in_0_0_0_0_slash_8():
    log = (b"[W socket.cpp:558] [c10d] The client socket has failed to connect to 0.0.0.5:40323 (errno: 110 - "
           b"Connection timed out).\n"
           b"[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of (05, 40323).\n")
    assert list(diagnoses(log))[0] == "MASTER_ADDR_MALFORMED"
    named = (b"[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of "
             b"(node05, 40323).\n")
    assert "MASTER_ADDR_MALFORMED" not in diagnoses(named)


def test_nccl_2_25_kernels_asking_more_shared_memory_than_a_consumer_blackwell_gpu_is_the_release():
    log = (b"node1:4766:4766 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n"
           b"node1:4766:4780 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856\n")
    assert list(diagnoses(log))[0] == "NCCL_RELEASE_BUG" and diagnoses(log)["NCCL_RELEASE_BUG"].confidence >= 0.5
    fixed = log.replace(b"2.25.1+cuda12.8", b"2.26.2+cuda12.8")
    assert diagnoses(fixed).get("NCCL_RELEASE_BUG") is None or diagnoses(fixed)["NCCL_RELEASE_BUG"].confidence < 0.35


def test_the_raise_statement_of_the_env_rendezvous_names_the_variable_a_launcher_sets():
    log = (b'  File "/env/lib/python3.8/site-packages/torch/distributed/rendezvous.py", line 166, in _env_rendezvous_handler\n'
           b'    raise _env_error("MASTER_ADDR")\n')
    assert list(diagnoses(log))[0] == "SCRIPT_WITHOUT_LAUNCHER"


def test_a_tensor_on_the_wrong_device_is_the_job_s_own_code_though_it_names_cuda():
    log = (b'  File "models/yolox.py", line 246, in get_output_and_grid\n'
           b"    reg_box[..., :2] = (reg_box[..., :2] + grid) * stride\n"
           b"RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and "
           b"cuda:0!\n")
    assert list(diagnoses(log))[0] == "USER_CODE_EXCEPTION"


def test_other_processes_on_gpu_0_are_not_the_cause_when_this_one_holds_most_of_it():
    log = (b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 388.00 MiB. GPU 0 has a total capacity of "
           b"23.64 GiB of which 562.06 MiB is free. Process 1140273 has 384.00 MiB memory in use. Including non-PyTorch "
           b"memory, this process has 22.14 GiB memory in use. Process 1209389 has 516.00 MiB memory in use.\n")
    ds = diagnoses(log)
    assert list(ds)[0] == "GPU_OUT_OF_MEMORY" and ds["GPU0_EXTRA_MEMORY"].confidence <= 0.3


SYSERR = (b"torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled system error (run with "
          b"NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n")


def test_nccl_connecting_to_a_link_local_or_loopback_peer_address_is_the_wrong_interface():
    for addr in (b"169.254.0.1", b"127.0.0.1"):
        log = SYSERR + b"misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to " + addr + \
            b"<40815> failed : Software caused connection abort\n"
        ds = diagnoses(log)
        assert list(ds)[0] == "NCCL_WRONG_INTERFACE_AUTOSELECTED" and ds[list(ds)[0]].confidence >= 0.5, addr
    routable = SYSERR + b"misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<40815> failed : " \
                        b"Software caused connection abort\n"
    assert list(diagnoses(routable))[0] != "NCCL_WRONG_INTERFACE_AUTOSELECTED"

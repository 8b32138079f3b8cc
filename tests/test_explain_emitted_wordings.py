"""Failures read from the wording of the code that prints them (issue 23, batch 8): DataLoader workers out of file
descriptors (torch's `_try_get_data`, CPython's `recvfds`, ATen's MapAllocator), a SignalException whose message was
lost, a module-qualified lowercase exception (`socket.gaierror`), an exception whose message goes on over the next
lines (c10's `NCCL error in:`), and cudaErrorDevicesUnavailable.
Lines are the templates as those releases fill them."""
from ddpdoctor.logscan.render import LOW, SHOW_FULL
from test_explain_calibration import explain, top  # the same two helpers: explain lines, its first answer

DL_FRAMES = [
    "Traceback (most recent call last):",
    '  File "train.py", line 211, in train',
    "    for batch_idx, sample in enumerate(loader):",
    '  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1326, in _try_get_data',
    "    raise RuntimeError(",
]


def test_the_dataloader_s_open_files_message_is_decisive_and_not_the_job_s_code():
    ex = explain(DL_FRAMES + [
        "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase the "
        "limit using `ulimit -n` in the shell or change the sharing strategy by calling "
        "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"])
    assert top(ex)[0] == "DATALOADER_OPEN_FILES_LIMIT" and top(ex)[1] >= LOW
    assert "USER_CODE_EXCEPTION" not in [d.failure.id for d in ex.diagnoses]


def test_older_torch_s_stripped_descriptor_and_emfile_name_the_same_limit():
    ancdata = explain(['  File "/usr/lib/python3.6/multiprocessing/reduction.py", line 161, in recvfds',
                       "RuntimeError: received 0 items of ancdata"])
    assert top(ancdata)[0] == "DATALOADER_OPEN_FILES_LIMIT" and top(ancdata)[1] >= LOW
    shm = explain(["RuntimeError: unable to open shared memory object </torch_30997_2076642173> in read-write mode: "
                   "Too many open files (24)"])
    assert top(shm)[0] == "DATALOADER_OPEN_FILES_LIMIT" and top(shm)[1] >= LOW
    # without errno (torch 1.x) the shm line alone is only likely: a segment already unlinked prints it too
    bare = explain(["RuntimeError: unable to open shared memory object </torch_30997_2076642173> in read-write mode"])
    assert top(bare)[0] == "DATALOADER_OPEN_FILES_LIMIT" and top(bare)[1] < LOW


def test_a_signal_exception_without_its_message_is_a_weak_pointer_to_a_hangup():
    # torch elastic handles SIGTERM, SIGINT, SIGHUP and SIGQUIT: the bare exception is one of four
    ex = explain(["torch.distributed.elastic.multiprocessing.api.SignalException"])
    fid, conf = top(ex)
    assert fid == "LAUNCHER_HANGUP_SIGHUP" and conf < SHOW_FULL
    assert any("got signal: 1" in e.note for e in ex.diagnoses[0].evidence)
    # with the signal number it decides; another signal is not a hangup
    assert top(explain(["torch.distributed.elastic.multiprocessing.api.SignalException: Process 2920830 got signal: 1"]))[1] >= LOW
    sigterm = explain(["torch.distributed.elastic.multiprocessing.api.SignalException: Process 2920830 got signal: 15"])
    assert "LAUNCHER_HANGUP_SIGHUP" not in [d.failure.id for d in sigterm.diagnoses]


def test_a_module_qualified_lowercase_exception_ends_its_traceback():
    ex = explain(["Traceback (most recent call last):",
                  '  File "scripts/train.py", line 25, in main',
                  "    dist_util.setup_dist()",
                  '  File ".\\guided_diffusion\\dist_util.py", line 34, in setup_dist',
                  "    hostname = socket.gethostbyname(socket.getfqdn())",
                  "socket.gaierror: [Errno 11001] getaddrinfo failed"])
    assert top(ex)[0] == "HOSTNAME_UNRESOLVABLE"
    assert not any("cut before its exception line" in n for d in ex.diagnoses for n in d.notes)


def test_an_exception_whose_message_goes_on_to_an_nccl_error_is_not_the_job_s_code():
    ex = explain(["RuntimeError: work = default_pg.broadcast([tensor], opts): ",
                  "NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:911, invalid usage, NCCL version 2.7.8",
                  "ncclInvalidUsage: This usually reflects invalid usage of NCCL library (such as too many async ops, "
                  "too many collectives at once, mixing streams in a group, etc).",
                  "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 6 (pid: 1211) of "
                  "binary: /usr/bin/python3"])
    assert "USER_CODE_EXCEPTION" not in [d.failure.id for d in ex.diagnoses]
    assert top(ex)[0] == "DUPLICATE_GPU_PER_RANK"
    # an ordinary exception whose message continues in the job's own words stays the job's
    own = explain(['  File "train.py", line 9, in step', "ValueError: bad batch:", "labels 3, inputs 4",
                   "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1) of "
                   "binary: /usr/bin/python3"])
    assert top(own)[0] == "USER_CODE_EXCEPTION"


def test_a_gpu_that_refuses_a_second_context_points_at_ranks_sharing_it_with_low_confidence():
    fid, conf = top(explain(["RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"]))
    assert fid == "GPU0_EXTRA_MEMORY" and SHOW_FULL <= conf < LOW

"""The most common failure (issue 23): one rank raises in the job's own code and torchrun stops the others.
The headline names that rank, its exception and the file:line in the job's code; the torn-down ranks' errors
are consequences. Lab logs: real torchrun + Gloo runs of tests/logs/jobs/user_valueerror.py
(tests/logs/capture_lab.py, recorded in lab-captures.json)."""
import io
from pathlib import Path

from ddpdoctor.logscan import explain_stream
from ddpdoctor.logscan.render import render_text
from ddpdoctor.logscan.user_error import is_user_frame

LOGS = Path(__file__).resolve().parent / "logs" / "USER_CODE_EXCEPTION"


def explain(text: str):
    return explain_stream(io.BytesIO(text.encode()), "t.log")


def explain_file(name: str):
    with open(LOGS / name, "rb") as f:
        return explain_stream(f, name)


def test_the_failing_rank_its_exception_and_its_line_are_the_headline():
    ex = explain_file("lab-user-valueerror-rank1.log")
    top = ex.diagnoses[0]
    assert top.failure.id == "USER_CODE_EXCEPTION" and top.confidence >= 0.5
    assert top.origin == {"rank": 1}
    assert "rank 1 raised ValueError at user_valueerror.py:20 in batches: batch 2 has 3 labels" in top.notes[0]
    assert "stopped 1 other worker" in top.notes[0]
    # the peer that saw the connection close is the consequence, ranked below and said to be one
    peer = next(d for d in ex.diagnoses if d.failure.id == "GLOO_PEER_EXITED")
    assert peer.consequence_of == "USER_CODE_EXCEPTION" and peer.confidence < top.confidence
    text = render_text(ex)
    assert "consequences only" not in text
    assert "GLOO_PEER_EXITED (33%, a consequence of USER_CODE_EXCEPTION)" in text


def test_the_store_hosting_rank_failing_stops_every_other_worker():
    ex = explain_file("lab-user-valueerror-store-rank.log")
    top = ex.diagnoses[0]
    assert top.failure.id == "USER_CODE_EXCEPTION" and top.origin == {"rank": 0}
    assert "stopped 2 other workers" in top.notes[0]


def test_torchruns_root_cause_rank_is_preferred_over_the_first_exception_in_the_log():
    log = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/me/train.py", line 30, in <module>
[rank0]:     evaluate()
[rank0]: KeyError: 'val_loss'
[rank2]: Traceback (most recent call last):
[rank2]:   File "/home/me/data.py", line 12, in load
[rank2]:     raise FileNotFoundError(path)
[rank2]: FileNotFoundError: /data/shard-7.bin
Root Cause (first observed failure):
[0]:
  host      : node1
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 4242)
"""
    top = explain(log).diagnoses[0]
    assert top.failure.id == "USER_CODE_EXCEPTION"
    assert "rank 2 raised FileNotFoundError at data.py:12 in load" in top.notes[0]


def test_an_error_the_catalog_explains_is_not_blamed_on_the_jobs_code():
    log = """Traceback (most recent call last):
  File "/home/me/train.py", line 5, in <module>
    local_rank = int(os.environ["LOCAL_RANK"])
  File "/usr/lib/python3.10/os.py", line 680, in __getitem__
    raise KeyError(key) from None
KeyError: 'LOCAL_RANK'
"""
    ids = [d.failure.id for d in explain(log).diagnoses]
    assert ids[0] == "SCRIPT_WITHOUT_LAUNCHER" and "USER_CODE_EXCEPTION" not in ids


def test_a_traceback_cut_before_its_last_line_names_the_last_frame_with_low_confidence():
    log = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/srv/job/run.py", line 104, in <module>
[rank3]:     trainer.train()
[rank3]:   File "/srv/job/trainer.py", line 211, in train
[rank3]:     batch = next(it)
[rank3]:   File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631, in __next__
[rank3]:     data = self._next_data()
...
"""
    top = explain(log).diagnoses[0]
    assert top.failure.id == "USER_CODE_EXCEPTION" and top.confidence < 0.5
    assert "trainer.py:211 in train" in top.notes[0] and top.notes[0].startswith("low confidence")


def test_a_bare_error_line_without_a_traceback_is_not_a_diagnosis():
    assert explain("epoch 1\nValueError: my dataset is empty\n").diagnoses == []


def test_library_frames_are_not_the_jobs_code():
    assert is_user_frame("/home/me/train.py")
    assert is_user_frame("C:\\Users\\me\\proj\\train.py")
    for lib in ("/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py",
                "/usr/lib/python3.10/runpy.py", "/usr/local/lib/python3.12/dist-packages/transformers/trainer.py",
                "/workspace/pypacks/accelerate/state.py", "<frozen runpy>",
                "C:\\Python311\\lib\\site-packages\\torch\\distributed\\run.py"):
        assert not is_user_frame(lib), lib


def test_tracebacks_after_the_launcher_forwarded_ctrl_c_are_the_teardown_not_the_jobs_error():
    # torch elastic's agent stops its workers with the signal it received (agent/server/api.py): SIGINT is Ctrl-C,
    # often pressed on a hang; the workers' KeyboardInterrupt tracebacks that follow are not a user-code exception
    log = "\n".join([
        "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4797 closing signal SIGINT",
        "Traceback (most recent call last):",
        '  File "main.py", line 84, in <module>',
        "    main()",
        '  File "main.py", line 60, in main',
        "    loss = train_step(batch)",
    ])
    assert "USER_CODE_EXCEPTION" not in [d.failure.id for d in explain(log).diagnoses]


_CUT_IN_PG_HELPER = (
    'Traceback (most recent call last):\n'
    '  File "/work/train.py", line 40, in <module>\n'
    '    dist.init_process_group("{backend}")\n'
    '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 1634, in '
    'init_process_group\n'
    '    default_pg, _ = _new_process_group_helper(\n'
    '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 1899, in '
    '_new_process_group_helper\n'
    '    backend_class = {cls}(backend_prefix_store, group_rank, group_size, pg_options)\n')


def test_a_traceback_cut_at_the_nccl_backends_constructor_names_no_gpu_with_low_confidence():
    # ProcessGroupNCCL's constructor first checks at::cuda::getNumGPUs() != 0 (ProcessGroupNCCL.cpp): its source line
    # under the frame says which call _new_process_group_helper was making
    ex = explain(_CUT_IN_PG_HELPER.format(backend="nccl", cls="ProcessGroupNCCL"))
    d = ex.diagnoses[0]
    assert d.failure.id == "TORCH_SEES_NO_GPU" and d.confidence < 0.5
    assert any("ProcessGroupNCCL's constructor" in n and "device_count()" in n for n in d.notes)


def test_the_same_frame_building_another_backend_is_not_read_as_no_gpu():
    ex = explain(_CUT_IN_PG_HELPER.format(backend="gloo", cls="ProcessGroupGloo"))
    assert "TORCH_SEES_NO_GPU" not in [d.failure.id for d in ex.diagnoses]

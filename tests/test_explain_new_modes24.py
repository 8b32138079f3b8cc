"""The failure modes added for issue 23 ("where a failure mode is missing from the catalog, add it with its emitting
code found"): HAMi's GPU-sharing interposer (HAMI_VGPU_INTERPOSER) and NCCL's memory-pool create on a vGPU without
unified memory (VGPU_UVM_DISABLED). The lines below are rendered from the emitting code's format strings
(HAMi-core src/include/log_utils.h + its LOG_ERROR/LOG_WARN messages; NCCL include/checks.h CUDACHECK in
src/init.cc commAlloc), not copied from a corpus log."""
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan.calibration import SHOW_FULL
from logtext import by_id, explain, ids

HAMI = "HAMI_VGPU_INTERPOSER"
VGPU = "VGPU_UVM_DISABLED"
LOADED = "[HAMI-core Msg(4012:139861543712576:libvgpu.c:871)]: Initializing....."


@pytest.mark.parametrize("line", [
    # HAMi-core since 2024-02 (d88e4d4): "[HAMI-core ERROR (pid:%d thread=%ld %s:%d)]: "
    "[HAMI-core ERROR (pid:311 thread=140001 multiprocess_memory_limit.c:1242)]: Illegal device id: -1",
    # the first public commit's prefix (8b7cd78, 2024-01-24)
    "[4pdvGPU ERROR (pid:311 thread=140001 multiprocess_memory_limit.c:743)]: Illegal device id: 16",
    # a poster's elision of the pid/thread part
    "[HAMI-core ERROR (multiprocess_memory_limit.c:831)]: Illegal device id: 850725928",
    "(VllmWorker rank=2 pid=77) [HAMI-core ERROR (pid:77 thread=1401 allocator.c:52)]: Device 2 OOM 8598323200 / 8589934592",
    "[HAMI-core Warn(1183:140318271428416:multiprocess_memory_limit.c:764)]: Lock shrreg timeout (trial 3/30), owner=1170",
    "[HAMI-core ERROR (pid:1183 thread=1403 multiprocess_memory_limit.c:791)]: Cannot acquire lock after 5 minutes, owner=1170",
    "[HAMI-core ERROR (pid:77 thread=1399 memory.c:590)]: Hijack failed: cuMemAddressReserve is NULL",
])
def test_a_hami_core_hook_failure_names_the_interposer_first(line):
    ex = explain([LOADED, line, "Segmentation fault (core dumped)"])
    assert ids(ex)[0] == HAMI
    assert by_id(ex, HAMI).confidence >= 0.5


def test_the_interposer_being_loaded_is_a_clue_never_a_cause():
    # every process of a HAMi pod prints its Msg lines, failing or not: alone they never name the mode
    healthy = explain([LOADED, "[HAMI-core Msg(4012:139861543712576:libvgpu.c:911)]: Initialized", "epoch 1 loss 0.52"])
    assert all(d.confidence < SHOW_FULL for d in healthy.diagnoses)
    failing = explain([LOADED, "node-a:57:57 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
                       "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda "
                       "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"])
    assert HAMI in ids(failing)
    assert by_id(failing, HAMI).confidence < SHOW_FULL


def test_another_tool_s_illegal_device_id_is_not_the_interposer():
    ex = explain(["RuntimeError: CUDA error: invalid device ordinal", "ERROR: Illegal device id: 9"])
    assert HAMI not in ids(ex)


def test_the_hami_oom_outranks_the_cuda_oom_it_causes():
    ex = explain(["[HAMI-core ERROR (pid:57 thread=1401 allocator.c:52)]: Device 0 OOM 10762584064 / 10737418240",
                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
                  "of 79.10 GiB of which 10.00 GiB is free."])
    assert ids(ex)[0] == HAMI


@pytest.mark.parametrize("line", [
    "node1:508:508 [0] init.cc:417 NCCL WARN Cuda failure 'operation not supported'",           # 2.23.4
    "[2026-04-13 19:52:24] vm-7:508:508 [3] init.cc:564 NCCL WARN Cuda failure 'operation not supported'",  # 2.30.7
])
def test_nccl_s_memory_pool_create_refused_names_the_vgpu_without_uvm(line):
    ex = explain([line, "vm-7:508:508 [3] NCCL INFO init.cc:1437 -> 1",
                  "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:77, unhandled cuda error (run "
                  "with NCCL_DEBUG=INFO for details), NCCL version 2.27.5"])
    assert ids(ex)[0] == VGPU and by_id(ex, VGPU).confidence >= 0.5


def test_operation_not_supported_from_another_nccl_file_is_not_the_memory_pool():
    ex = explain(["node1:1:1 [0] transport/nvls.cc:180 NCCL WARN Cuda failure 'operation not supported'"])
    assert VGPU not in ids(ex)


@pytest.mark.torchjob   # runs kubectl (a real process)
def test_the_pod_manifest_fix_adds_the_hami_switch_to_every_container(tmp_path):
    """The fix's manifest command, as the catalog gives it up to `&& kubectl replace` (that part needs a cluster),
    run by kubectl on a realistic HAMi pod manifest (two containers, gpumem limit, flow-style lists)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed")
    cmd = next(c for c in catalog.failures()[HAMI].fix.commands if "--local" in c).split(" && ")[0]
    argv = shlex.split(cmd)
    out_name = argv[argv.index(">") + 1]
    argv = argv[:argv.index(">")]
    (tmp_path / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: vllm-tp4\nspec:\n  schedulerName: hami-scheduler\n"
        "  containers:\n  - name: vllm\n    image: vllm/vllm-openai:v0.18.0\n"
        "    command: [\"vllm\", \"serve\", \"/models/m\", \"--tensor-parallel-size\", \"4\"]\n"
        "    env:\n    - name: NCCL_DEBUG\n      value: INFO\n"
        "    resources:\n      limits:\n        nvidia.com/gpu: 4\n        nvidia.com/gpumem: 40000\n"
        "  - name: sidecar\n    image: busybox:1.36\n    command: [\"sleep\", \"infinity\"]\n")
    res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (tmp_path / out_name).write_text(res.stdout)
    yaml = pytest.importorskip("yaml")
    pod = yaml.safe_load((tmp_path / out_name).read_text())
    for c in pod["spec"]["containers"]:
        assert {"name": "CUDA_DISABLE_CONTROL", "value": "true"} in c["env"], c["name"]
    vllm = pod["spec"]["containers"][0]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in vllm["env"]          # what was there stays
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert str(vllm["resources"]["limits"]["nvidia.com/gpu"]) == "4"


def test_each_new_mode_has_its_fixtures_and_reference_page():
    root = Path(__file__).parent.parent
    for fid in (HAMI, VGPU):
        logs = sorted((root / "tests" / "logs" / fid).glob("*.log"))
        assert logs, fid
        for p in logs:
            assert explain(p.read_text().splitlines()).diagnoses[0].failure.id == fid, p.name
        assert (root / "docs" / "reference" / "checks" / f"{fid}.md").exists()

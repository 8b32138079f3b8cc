"""TORCH_SEES_NO_GPU and TORCH_BUILD_LACKS_GPU_ARCH (issue 23): each wording the emitting code prints, in the
surroundings users post it in, names its mode first; the weaker line gives the weaker answer; neither mode takes
a line that belongs to another."""
import io

import pytest

from ddpdoctor.logscan import explain_stream


def diagnose(text: str):
    return explain_stream(io.BytesIO(text.encode())).diagnoses


@pytest.mark.parametrize("line", [
    # torch 1.x .. 2.2 (TORCH_CHECK), torch >= 2.3/2.4 (TORCH_CHECK_WITH ValueError), under torchrun's rank prefix
    "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
    "[rank0]: ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
    "AssertionError: Torch not compiled with CUDA enabled",
    "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
    "a driver from http://www.nvidia.com/Download/index.aspx",
])
def test_every_wording_of_no_gpu_names_torch_sees_no_gpu(line):
    diags = diagnose("Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
                     "    dist.init_process_group(\"nccl\")\n" + line + "\n")
    assert diags and diags[0].failure.id == "TORCH_SEES_NO_GPU"


def test_the_no_gpu_line_says_it_does_not_tell_the_three_causes_apart():
    d = diagnose("ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!\n")[0]
    text = " ".join(e.note for e in d.evidence) + d.failure.cause + d.failure.confirm
    assert "low confidence" in text
    for way in ("torch.version.cuda", "device_count()", "nvidia-smi", "CUDA_VISIBLE_DEVICES"):
        assert way in d.failure.confirm, way


@pytest.mark.parametrize("line", [
    "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
    "NVIDIA H800 with CUDA capability sm_90 is not compatible with the current PyTorch installation.",
    "    Found GPU0 Tesla K40m which is of cuda capability 3.5.",                     # old_gpu_warn (torch 1.x)
    "Found GPU0 NVIDIA GeForce RTX 5090 which is of compute capability (CC) 12.0.",  # torch 2.11+
    "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
    "RuntimeError: cuda runtime error (48) : no kernel image is available for execution on the device at "
    "/pytorch/aten/src/THC/generic/THCTensorMath.cu:15",
    "node1:1234:1300 [0] init.cc:412 NCCL WARN Cuda failure 209 'no kernel image is available for execution on "
    "the device'",
])
def test_every_wording_of_a_missing_gpu_arch_names_the_mode(line):
    diags = diagnose(line + "\n")
    assert diags and diags[0].failure.id == "TORCH_BUILD_LACKS_GPU_ARCH"


def test_no_kernel_image_alone_is_weaker_than_torchs_own_warning():
    # any binary in the process (an extension too) raises it; torch's warning names torch itself
    alone = diagnose("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")[0]
    warned = diagnose("NVIDIA GeForce RTX 5060 Ti with CUDA capability sm_120 is not compatible with the current "
                      "PyTorch installation.\n")[0]
    assert alone.confidence < warned.confidence


@pytest.mark.parametrize("line,owner", [
    ("RuntimeError: No CUDA GPUs are available", "CUDA_VISIBLE_DEVICES_HIDES_GPUS"),
    ("RuntimeError: Distributed package doesn't have NCCL built in", "WINDOWS_NO_NCCL_BACKEND"),
    ("Found GPU0 Tesla P100 which requires CUDA_VERSION >= 8000 for optimal performance", None),
])
def test_lines_of_other_modes_stay_theirs(line, owner):
    ids = [d.failure.id for d in diagnose(line + "\n")]
    assert "TORCH_SEES_NO_GPU" not in ids[:1] and "TORCH_BUILD_LACKS_GPU_ARCH" not in ids[:1]
    if owner:
        assert ids and ids[0] == owner

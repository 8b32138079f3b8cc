"""Failure modes of containers and node limits: bridge networks, /dev/shm, InfiniBand devices, memlock."""
from __future__ import annotations

from ddpdoctor.catalog import shared as S
from ddpdoctor.catalog.model import CLUE, SYMPTOM, FailureMode, Signature, fix

MODES = (
    FailureMode(
        id="CONTAINER_BRIDGE_NETWORK",
        title="Multi-node training from containers on Docker's bridge network",
        category="container",
        summary="NCCL bootstraps on `eth0:172.17.x.x` and fails with `unhandled system error` or connection "
                "timeouts between nodes.",
        cause="On the default bridge network each container advertises its private 172.17.x.x address, which "
              "the other host cannot reach.",
        fix=fix("Run the containers with `--network=host` (and `--ipc=host`), or on an overlay/CNI network that "
                "routes between hosts, and point NCCL_SOCKET_IFNAME at it.",
                "docker run --network=host --ipc=host ..."),
        signatures=(
            Signature(r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(?P<nic>eth\d+):(?P<addr>172\.1[7-9]\.\d+\.\d+)",
                      0.55, CLUE, trigger=" : using ",
                      example="node1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>",
                      note="NCCL uses {addr}, an address of Docker's default bridge network"),
            Signature(r"Connect to (?P<addr>172\.1[7-9]\.\d+\.\d+)<\d+> failed", 0.6, trigger="failed",
                      example="node2:51:77 [0] misc/socket.cc:523 NCCL WARN Net : Connect to 172.17.0.2<41637> failed : "
                              "No route to host",
                      note="a peer advertised {addr}, an address of Docker's default bridge on its host"),
            Signature(S.NCCL_SYSTEM_ERROR, 0.15, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
        ),
        checks=("DD304", "DD303", "DD104"),
        confirm="ddpdoctor network --master {master}   (inside the container)",
        preflight="DD304/DD303 predict the interface NCCL/Gloo pick and compare it with the route to the master.",
        related=("NCCL_WRONG_INTERFACE_AUTOSELECTED", "NCCL_SYSTEM_ERROR"),
        sources=("deepinsight/insightface#1444", "pytorch/pytorch#23363", "huggingface/accelerate#2107"),
    ),
    FailureMode(
        id="NCCL_SHM_TOO_SMALL",
        title="/dev/shm is too small for NCCL's shared-memory transport",
        category="container",
        summary="NCCL fails during init with `Error while creating shared memory segment /dev/shm/nccl-*` or "
                "`posix_fallocate failed: No space left on device`, then `unhandled system error`.",
        cause="Docker gives containers a 64 MB /dev/shm by default; NCCL's SHM transport between GPUs of one node "
              "needs several MB per pair of ranks.",
        fix=fix("Give the container a larger /dev/shm (`--shm-size=16g` or `--ipc=host`; on Kubernetes an emptyDir "
                "with medium: Memory at /dev/shm). NCCL_SHM_DISABLE=1 works around it at a speed cost.",
                "df -h /dev/shm", "docker run --shm-size=16g ..."),
        signatures=(
            Signature(r"Error while creating shared memory segment /dev/shm/nccl-\S* \(size (?P<size>\d+)", 0.95,
                      example="NCCL WARN Error while creating shared memory segment /dev/shm/nccl-pZafXL "
                              "(size 7340384)"),
            Signature(r"posix_fallocate failed: No space left on device", 0.9,
                      example="include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device"),
            Signature(r"failed to extend /dev/shm/nccl-\S* to \d+ bytes", 0.9,
                      example="misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to "
                              "5967876 bytes"),
            Signature(S.NCCL_SYSTEM_ERROR, 0.15, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
        ),
        checks=("DD601", "DD501"),
        confirm="ddpdoctor prolog -v --select DD601   (or: df -h /dev/shm, inside the container)",
        preflight="DD601 compares the size of /dev/shm with the site minimum; DD501 (smoke, NCCL) reproduces the "
                  "init failure and names the rank.",
        related=("DATALOADER_SHM_BUS_ERROR", "DEV_SHM_PERMISSION_DENIED", "NCCL_SYSTEM_ERROR"),
        sources=("pytorch/torchtitan#853", "NVIDIA/nccl#342", "NVIDIA/nccl#290", "vllm-project/vllm#1710"),
    ),
    FailureMode(
        id="DEV_SHM_PERMISSION_DENIED",
        title="The training user cannot write to /dev/shm",
        category="container",
        summary="NCCL init fails with `shm_open failed : Permission denied`.",
        cause="/dev/shm is not world-writable (mode other than 1777, or restrictive mount options) for the user "
              "the job runs as.",
        fix=fix("Restore the usual mode of /dev/shm (1777, sticky and writable by all).", "chmod 1777 /dev/shm"),
        signatures=(
            Signature(r"shm_open failed\s*: Permission denied", 0.95,
                      example="include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied"),
        ),
        checks=("DD602",),
        confirm="ddpdoctor prolog -v --select DD602   (or: stat -c '%a' /dev/shm, expect 1777)",
        preflight="DD602 checks that /dev/shm is mounted read-write with mode 1777.",
        related=("NCCL_SHM_TOO_SMALL",),
        sources=("pytorch/pytorch#37004", "NVIDIA/nccl#328"),
    ),
    FailureMode(
        id="DATALOADER_SHM_BUS_ERROR",
        title="DataLoader workers run out of shared memory",
        category="container",
        summary="`Unexpected bus error encountered in worker` / `DataLoader worker ... is killed by signal: Bus "
                "error`; torchrun reports exit code -7 (SIGBUS).",
        cause="DataLoader workers hand batches to the trainer through /dev/shm. nproc-per-node x num_workers x "
              "batch size does not fit a small /dev/shm (containers default to 64 MB), and writing past it raises "
              "SIGBUS.",
        fix=fix("Enlarge /dev/shm (`--shm-size`, `--ipc=host`), use fewer workers or smaller prefetch, or "
                "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
                "df -h /dev/shm",
                code="torch.multiprocessing.set_sharing_strategy('file_system')"),
        signatures=(
            Signature(r"Unexpected bus error encountered in worker", 0.95,
                      example="ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
                              "shared memory (shm)."),
            Signature(r"DataLoader worker \(pid \d+\) is killed by signal: Bus error", 0.95,
                      example="RuntimeError: DataLoader worker (pid 11011) is killed by signal: Bus error. It is "
                              "possible that dataloader's workers are out of shared memory. Please try to raise your "
                              "shared memory limit."),
            Signature(S.TORCHRUN_EXIT.replace(r"(?P<code>-?\d+)", "-7"), 0.75,
                      example="ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 "
                              "(pid: 291) of binary: /usr/bin/python"),
            Signature(r"Signal 7 \(SIGBUS\) received by PID", 0.75,
                      example="  traceback : Signal 7 (SIGBUS) received by PID 291"),
            Signature(r"unable to allocate shared memory\(shm\) for file <[^>]*>: No space left on device", 0.9,
                      example="RuntimeError: unable to allocate shared memory(shm) for file </torch_13895_3252141513_0>: "
                              "No space left on device (28)",
                      note="a DataLoader worker could not put a batch into /dev/shm"),
            Signature(r"unable to write to file </torch_\S+>: No space left on device", 0.8,
                      example="RuntimeError: unable to write to file </torch_1234_567_0>: No space left on device (28)"),
        ),
        checks=("DD601",),
        confirm="ddpdoctor prolog -v --select DD601   (or: df -h /dev/shm)",
        preflight="DD601 checks /dev/shm against the site minimum; how much the DataLoader needs depends on "
                  "nproc-per-node x workers x batch size.",
        related=("NCCL_SHM_TOO_SMALL", "HOST_OOM_SIGKILL"),
        sources=("pytorch/pytorch#5040", "pytorch/pytorch#108861", "open-mmlab/mmdetection#1997"),
    ),
    FailureMode(
        id="IB_DEVICE_NOT_VISIBLE",
        title="InfiniBand/RoCE devices are not visible to NCCL",
        category="container",
        summary="NCCL logs `NET/IB : No device found` or `Failed to open libibverbs` and falls back to TCP "
                "sockets (`Using network Socket`): slow, or hanging if the socket interface is also wrong.",
        cause="The host has RDMA NICs but the container lacks /dev/infiniband, the rdma-core / libibverbs "
              "libraries, or the IPC_LOCK capability.",
        fix=fix("Pass the RDMA devices into the container (`--device=/dev/infiniband`, or the RDMA device plugin), "
                "install rdma-core/libibverbs in the image and add IPC_LOCK. If the job is meant to use TCP, say "
                "so with NCCL_IB_DISABLE=1.",
                "ls /dev/infiniband && ibv_devinfo | head",
                "docker run --device=/dev/infiniband --cap-add=IPC_LOCK ..."),
        signatures=(
            Signature(r"Error: network IB not found", 0.85,
                      example="node1:55:55 [0] NCCL WARN Error: network IB not found.",
                      note="NCCL was told to use InfiniBand (NCCL_NET=IB) but sees no IB device"),
            Signature(r"NET/IB : No device found", 0.35, CLUE,
                      example="node1:55:55 [0] NCCL INFO NET/IB : No device found.",
                      note="NCCL sees no InfiniBand/RoCE device"),
            Signature(r"Failed to open libibverbs\.so", 0.35, CLUE,
                      example="node1:55:55 [0] NCCL INFO Failed to open libibverbs.so[.1]",
                      note="the RDMA user-space library is missing"),
        ),
        checks=("DD503",),
        confirm="ls /dev/infiniband; ldconfig -p | grep libibverbs   (inside the container)",
        preflight="DD503 (smoke with --expect-busbw) shows the bandwidth of a socket fallback; proposed DD3xx 'RDMA "
                  "devices on the host are usable inside the job' would name the cause.",
        related=("IB_MEMLOCK_LIMIT", "NCCL_WRONG_INTERFACE_AUTOSELECTED"),
        sources=("NVIDIA/nccl#952", "NVIDIA/nccl#847", "pytorch/pytorch#73790"),
    ),
    FailureMode(
        id="IB_MEMLOCK_LIMIT",
        title="The locked-memory limit is too low for RDMA",
        category="container",
        summary="NCCL warns that `ibv_reg_mr` fails with `Cannot allocate memory`, or that `ibv_create_cq` / "
                "`ibv_create_qp` failed.",
        cause="RDMA registers (pins) memory, which counts against `ulimit -l`. Docker defaults to 64 KB, some "
              "distributions to 8 MB, and mpirun/srun may not propagate a higher limit.",
        fix=fix("Allow unlimited locked memory in the launch context: `memlock unlimited` in "
                "/etc/security/limits.conf (then log in again), `docker run --ulimit memlock=-1`, Slurm "
                "PropagateResourceLimits.",
                "ulimit -l", "docker run --ulimit memlock=-1 ..."),
        signatures=(
            Signature(r"Call to ibv_reg_mr\w* failed with error Cannot allocate memory", 0.9,
                      example="misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot "
                              "allocate memory"),
            Signature(r"Call to ibv_create_cq failed", 0.75,
                      example="misc/ibvwrap.cc:268 NCCL WARN Call to ibv_create_cq failed"),
            Signature(r"Call to ibv_create_qp failed", 0.6, example="NCCL WARN Call to ibv_create_qp failed"),
            Signature(S.NCCL_SYSTEM_ERROR, 0.15, SYMPTOM, example=S.NCCL_SYSTEM_ERROR_EX,
                      trigger=S.NCCL_SYSTEM_ERROR_TRIGGER),
        ),
        checks=("DD603", "DD501"),
        confirm="srun bash -c 'ulimit -l'   (in the exact launch path; expect 'unlimited')",
        preflight="DD603 checks the locked-memory limit on nodes with RDMA devices; DD501 (smoke across nodes) "
                  "reproduces the failure.",
        related=("IB_DEVICE_NOT_VISIBLE", "NCCL_SYSTEM_ERROR"),
        sources=("NVIDIA/nccl-tests#206", "horovod/horovod#98", "NVIDIA/nccl#380"),
    ),
)

"""Log lines that several failure modes produce (the collisions of shared/failure-catalog.md §3).

Each is one pattern; the failure modes it may point at list it with a low weight, so the line
alone ranks them as possibilities and a specific line elsewhere in the log decides.
"""
from __future__ import annotations

# c10d TCPStore client could not reach the store (rendezvous endpoint or MASTER_ADDR:PORT).
STORE_CONNECT_TIMEOUT = (r"client socket has timed out after \d+(?:\.\d+)?m?s while trying to connect to "
                         r"\((?P<host>[^,()]+), (?P<port>\d+)\)")
STORE_CONNECT_TIMEOUT_EX = ("TimeoutError: The client socket has timed out after 1800s while trying to connect to "
                            "(10.1.0.4, 29500).")
RDZV_CONNECTION_ERROR = r"RendezvousConnectionError: The connection to the C10d store has failed"
RDZV_CONNECTION_ERROR_EX = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
                            "C10d store has failed. See inner exception for details.")
CONNECT_TIMED_OUT = r"connect\(\) timed out\. Original timeout was \d+ ms"
CONNECT_TIMED_OUT_EX = "RuntimeError: connect() timed out. Original timeout was 900000 ms."

# Not every node joined the rendezvous in time.
RDZV_TIMEOUT = r"RendezvousTimeoutError"
RDZV_TIMEOUT_EX = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
CLIENTS_JOINED = r"Timed out after \d+ seconds waiting for clients\. (?P<joined>\d+)/(?P<expected>\d+) clients joined"
CLIENTS_JOINED_EX = ("torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. "
                     "1/2 clients joined.")

# NCCL's catch-all for errors of the operating system (sockets, shared memory, ibverbs).
NCCL_SYSTEM_ERROR = r"(?i)unhandled system error|ncclSystemError"
NCCL_SYSTEM_ERROR_EX = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
                        "NCCL version 2.20.5")
NCCL_SYSTEM_ERROR_TRIGGER = "error"  # 'unhandled system error' and 'ncclSystemError' both contain it

# NCCL's bootstrap address came out garbled: wrong interface name or different NCCL builds.
NCCL_BAD_FAMILY = r"with family (?P<family>\d+) is neither AF_INET\(2\) nor AF_INET6\(10\)"
NCCL_BAD_FAMILY_EX = ("misc/socket.cc:484 NCCL WARN ncclSocketInit: connecting to address  with family 0 is neither "
                      "AF_INET(2) nor AF_INET6(10)")

# getaddrinfo failed: the name does not resolve, is malformed, or its DNS record is not there yet.
GAI_ERROR = r"socket\.gaierror: \[Errno -(?:2|3|5)\]"
GAI_ERROR_EX = "socket.gaierror: [Errno -2] Name or service not known"
HOST_NOT_FOUND = r"ValueError: host not found: "
HOST_NOT_FOUND_EX = "ValueError: host not found: Name or service not known"

CUDA_INVALID_ORDINAL = r"(?i)invalid device ordinal"
CUDA_INVALID_ORDINAL_EX = "RuntimeError: CUDA error: invalid device ordinal"

# torchrun's per-worker failure line; the exit code says which kind of failure.
TORCHRUN_EXIT = r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local_rank>\d+)"

# Collective watchdog: a collective did not finish in time on this rank.
NCCL_WATCHDOG = (r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
                 r"OpType=(?P<op>\w+)")
NCCL_WATCHDOG_EX = ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
                    "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds "
                    "before timing out.")

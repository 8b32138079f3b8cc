"""Put on PYTHONPATH by tests/test_inspect_smoke_lag_torchjob.py: makes one smoke worker (STALL_RANK) stall before import torch."""
import os, signal, threading, time
if os.environ.get("DDPDOCTOR_SMOKE_FD") and os.environ.get("STALL_RANK") == os.environ.get("RANK"):
    if os.environ.get("STALL_HOW") == "stop":  # stopped while it imports torch (after its first heartbeats)
        threading.Timer(float(os.environ.get("STALL_AFTER", "0.5")), os.kill, (os.getpid(), signal.SIGSTOP)).start()
    else:
        time.sleep(3600)  # stuck before the worker even imports torch

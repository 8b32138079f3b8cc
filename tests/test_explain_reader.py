"""Reading logs as users have them: any size, any line ending, colours, junk, compression."""
import importlib.util
import codecs
import gzip
import io
import os
import random
import tracemalloc

import pytest

from ddpdoctor import catalog
from ddpdoctor.logscan import explain_stream
from ddpdoctor.logscan.matcher import FIND, Matcher, _bytes_find, split_origin
from ddpdoctor.logscan.reader import blocks

LOOPBACK = b"RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR: " \
           b"Connection refused, remote=[127.0.1.1]:57251"
SHM = b"node1:214:392 [2] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment " \
      b"/dev/shm/nccl-fjwOOB (size 9637888)"


def explain(data: bytes):
    return explain_stream(io.BytesIO(data), "test")


def top(data: bytes):
    ex = explain(data)
    return ex.diagnoses[0] if ex.diagnoses else None


def test_line_numbers_count_newlines_like_grep_n():
    data = b"a\n\nb\n" + LOOPBACK + b"\nc\n"
    d = top(data)
    assert d.failure.id == "HOSTNAME_RESOLVES_TO_LOOPBACK"
    assert d.evidence[0].line == 4
    assert explain(data).lines == 5


def test_crlf_ansi_colours_and_nul_bytes_do_not_hide_a_signature():
    coloured = b"\x1b[31m" + SHM.replace(b"NCCL WARN", b"NCCL \x1b[1mWARN\x1b[0m") + b"\x1b[0m"
    data = b"start\r\n\x00\x00junk\r\n" + coloured + b"\r\nend\r\n"
    d = top(data)
    assert d.failure.id == "NCCL_SHM_TOO_SMALL"
    assert d.evidence[0].line == 3
    assert "\x1b" not in d.evidence[0].text and "\r" not in d.evidence[0].text


def test_utf16_log_from_powershell_is_read():
    text = "PS C:\\> torchrun train.py\r\nRuntimeError: use_libuv was requested but PyTorch was build without " \
           "libuv support\r\n"
    data = codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    d = top(data)
    assert d.failure.id == "WINDOWS_LIBUV_UNSUPPORTED" and d.evidence[0].line == 2


def test_gzip_log_is_read():
    d = top(gzip.compress(b"x\n" * 1000 + SHM + b"\n"))
    assert d.failure.id == "NCCL_SHM_TOO_SMALL" and d.evidence[0].line == 1001


def test_empty_input_and_binary_junk_explain_nothing_without_crashing():
    assert explain(b"").diagnoses == [] and explain(b"").lines == 0
    rnd = random.Random(3)
    junk = bytes(rnd.randrange(256) for _ in range(300_000))
    ex = explain(junk)
    assert ex.bytes == len(junk)
    assert all(d.confidence < 0.5 for d in ex.diagnoses)


def test_bare_carriage_returns_of_progress_bars_split_the_display_line():
    data = b"10%|#  |\r50%|#### |\r" + SHM + b"\r100%|#####|\n"
    d = top(data)
    assert d.failure.id == "NCCL_SHM_TOO_SMALL"
    assert d.evidence[0].line == 1 and d.evidence[0].text.startswith("node1:214")


class _OneHugeLine(io.RawIOBase):
    """`size` bytes of log junk without a newline, then a signature line; generated, never held whole."""

    def __init__(self, size: int, tail: bytes):
        self.left = size
        self.tail = tail
        self.block = (b"loss=0.123 step=42 " * 3449)[:65536]

    def readable(self):
        return True

    def readinto(self, b):
        if self.left > 0:
            n = min(len(b), self.left, len(self.block))
            b[:n] = self.block[:n]
            self.left -= n
            return n
        n = min(len(b), len(self.tail))
        b[:n] = self.tail[:n]
        self.tail = self.tail[n:]
        return n


def test_a_huge_single_line_streams_in_constant_memory():
    size = 96 << 20
    tracemalloc.start()
    try:
        ex = explain_stream(io.BufferedReader(_OneHugeLine(size, b" " + SHM + b"\nafter\n")), "huge")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ex.diagnoses and ex.diagnoses[0].failure.id == "NCCL_SHM_TOO_SMALL"
    assert ex.diagnoses[0].evidence[0].line == 1 and ex.lines == 2
    assert len(ex.diagnoses[0].evidence[0].text) <= 2000
    assert peak < 40 << 20, f"peak {peak >> 20} MiB for a {size >> 20} MiB line"


def test_small_blocks_give_the_same_answer_as_large_ones():
    path = os.path.join(os.path.dirname(__file__), "logs", "HOSTNAME_RESOLVES_TO_LOOPBACK", "lab-loopback-c10d.log")
    data = open(path, "rb").read()
    m = Matcher(catalog.failures())
    big = [(lm.line, sorted(r.index for r, _ in lm.matches)) for lm in m.scan(io.BytesIO(data))]
    small = [(lm.line, sorted(r.index for r, _ in lm.matches)) for lm in m.scan(io.BytesIO(data), chunk=4096)]
    assert big == small and big


def test_blocks_keep_whole_lines_and_pass_overlong_ones_in_pieces():
    out = list(blocks(io.BytesIO(b"ab\ncd\n" + b"x" * 50 + b"\nend"), chunk=16))
    assert b"".join(b.data for b in out) == b"ab\ncd\n" + b"x" * 50 + b"\nend"
    assert [b.first_line for b in out if not b.continues][-1] == 4
    assert any(b.continues for b in out)


@pytest.mark.skipif(FIND is _bytes_find, reason="no libc memmem here")
def test_memmem_finder_agrees_with_bytes_find():
    rnd = random.Random(11)
    for _ in range(300):
        hay = bytes(rnd.choice(b"abc\n ") for _ in range(rnd.randrange(0, 200)))
        needle = bytes(rnd.choice(b"abc") for _ in range(rnd.randrange(1, 4)))
        start = rnd.randrange(0, len(hay) + 2)
        assert FIND(hay, needle, start) == hay.find(needle, start), (hay, needle, start)


def test_memmem_and_bytes_find_scanners_agree_on_the_corpus():
    m1 = Matcher(catalog.failures(), find=FIND, multi=False)
    m2 = Matcher(catalog.failures(), find=_bytes_find, multi=False)
    logs = os.path.join(os.path.dirname(__file__), "logs")
    for folder in sorted(os.listdir(logs)):
        d = os.path.join(logs, folder)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            data = open(os.path.join(d, name), "rb").read()
            a = [(lm.line, [r.index for r, _ in lm.matches]) for lm in m1.scan(io.BytesIO(data))]
            b = [(lm.line, [r.index for r, _ in lm.matches]) for lm in m2.scan(io.BytesIO(data))]
            assert a == b, name


def _corpus_bytes() -> bytes:
    logs = os.path.join(os.path.dirname(__file__), "logs")
    parts = [open(os.path.join(logs, f, n), "rb").read() for f in sorted(os.listdir(logs))
             if os.path.isdir(os.path.join(logs, f)) for n in sorted(os.listdir(os.path.join(logs, f)))]
    return b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)


@pytest.mark.skipif(importlib.util.find_spec("ahocorasick_rs") is None, reason="ahocorasick_rs not installed")
def test_one_aho_corasick_pass_finds_the_hits_of_the_memmem_passes():
    """The single multi-pattern pass must stop at exactly the hits the per-gate passes stop at: on the
    corpus, and on random text dense with overlapping gate words, CR, and lines past MAX_WINDOW."""
    from ddpdoctor.logscan import matcher as M
    fast, slow = Matcher(catalog.failures()), Matcher(catalog.failures(), multi=False)
    assert fast._ac is not None and slow._ac is None
    low = _corpus_bytes().lower()
    assert sorted(fast._all_gate_hits(low)) == sorted(slow._gate_hits(low, slow._gate_list))
    rnd = random.Random(23)
    gates = fast._gate_list
    for _ in range(200):
        pieces = []
        for _ in range(rnd.randrange(1, 60)):
            k = rnd.random()
            if k < 0.4:
                g = rnd.choice(gates)
                pieces.append(g[:rnd.randrange(1, len(g) + 1)] if rnd.random() < 0.3 else g)
            elif k < 0.5:
                pieces.append(rnd.choice([b"\n", b"\r", b"\r\n"]))
            elif k < 0.53:
                pieces.append(b"x" * rnd.randrange(M.MAX_WINDOW // 2, 2 * M.MAX_WINDOW))
            else:
                pieces.append(bytes(rnd.choice(b"aeimorstu :=[") for _ in range(rnd.randrange(0, 12))))
        low = b"".join(pieces)
        assert sorted(fast._all_gate_hits(low)) == sorted(slow._gate_hits(low, slow._gate_list)), low[:200]


def test_multi_pattern_and_memmem_scanners_agree_on_the_corpus():
    data = _corpus_bytes()
    fast, slow = Matcher(catalog.failures()), Matcher(catalog.failures(), multi=False)
    a = [(lm.line, lm.text, sorted((r.index, sorted(g.items())) for r, g in lm.matches)) for lm in fast.scan(io.BytesIO(data))]
    b = [(lm.line, lm.text, sorted((r.index, sorted(g.items())) for r, g in lm.matches)) for lm in slow.scan(io.BytesIO(data))]
    assert a == b and len(a) > 100


@pytest.mark.skipif(FIND is _bytes_find, reason="no libc memmem here: the gate passes stay on one thread")
def test_threaded_gate_passes_find_what_one_thread_finds(monkeypatch):
    """Blocks >= PARALLEL_MIN split their gate words over threads: same lines, same rules, same order."""
    from ddpdoctor.logscan import matcher as M
    logs = os.path.join(os.path.dirname(__file__), "logs")
    parts = [open(os.path.join(logs, f, n), "rb").read() for f in sorted(os.listdir(logs))
             if os.path.isdir(os.path.join(logs, f)) for n in sorted(os.listdir(os.path.join(logs, f)))]
    data = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts) * 3
    assert len(data) > 2 * M.PARALLEL_MIN // 4
    monkeypatch.setattr(M, "PARALLEL_MIN", 64 << 10)
    m = Matcher(catalog.failures(), multi=False)  # the threads split the memmem passes only

    def run(threads: str):
        monkeypatch.setenv("DDPDOCTOR_SCAN_THREADS", threads)
        return [(lm.line, sorted(r.index for r, _ in lm.matches)) for lm in m.scan(io.BytesIO(data), chunk=256 << 10)]
    one, many = run("1"), run("")
    assert one == many and len(one) > 100
    if M._POOL_SIZE > 1:
        assert M._POOL, "the pool was never used: the threaded path went untested"


@pytest.mark.parametrize("line,host,rank", [
    ("node2: [rank3]: RuntimeError: boom", "node2", 3),
    ("gpu-a-03:1772:1772 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", "gpu-a-03", None),
    ("[1,5]<stderr>:RuntimeError: boom", None, 5),
    ("7: Traceback (most recent call last):", None, 7),
    ("[default2]:RuntimeError: boom", None, 2),
    ("[trainer1]:[rank5]: RuntimeError: boom", None, 5),   # torchrun --role trainer --tee: global rank wins
    ("[trainer1]:RuntimeError: boom", None, 1),
    ("(RayTrainWorker pid=4242, ip=10.0.0.5) [rank1]: RuntimeError: boom", "10.0.0.5", 1),
    ("(RayTrainWorker pid=4242) RuntimeError: boom", None, None),
    ("RuntimeError: boom", None, None),
    ("main.py: error: unrecognized arguments: --local-rank=0", None, None),
    ("libtorch_cuda.so: undefined symbol: ncclCommRegister", None, None),   # the dynamic loader's prefix
    ("[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout", None, 1),
])
def test_origin_of_a_line_comes_from_its_prefix_or_message(line, host, rank):
    _, h, r = split_origin(line)
    assert (h, r) == (host, rank)


# -- reading a log as a person would (issue 23 §2)

def _ids_of(text: str) -> list[str]:
    import io as _io

    from ddpdoctor.logscan import explain_stream as _explain
    return [d.failure.id for d in _explain(_io.BytesIO(text.encode()), "t.log").diagnoses]


def test_a_message_wrapped_over_two_lines_is_read_as_one():
    # posted from a narrow terminal: "Bus" ends the line, "error." starts the next one (fastai/docker-containers#21)
    log = ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\n"
           "error. It is possible that dataloader's workers are out of shared\n"
           "memory. Please try to raise your shared memory limit.\n")
    assert _ids_of(log)[:1] == ["DATALOADER_SHM_BUS_ERROR"]


def test_a_wrapped_message_whose_quoted_part_starts_the_next_line_is_read_as_one():
    # a library's exception (DeepEP's EPException: "Failed: CUDA error <file>:<line> '<cudaGetErrorString>'") posted
    # wrapped before its quoted part: the CUDA error string alone names the cause, though only the first line holds
    # the word its signature is gated on
    log = ("RuntimeError: Failed: CUDA error /workspace/DeepEP/csrc/deep_ep.cpp:211\n"
           "'peer access is not supported between these two devices'\n")
    assert _ids_of(log)[:1] == ["CONSUMER_GPU_P2P_BROKEN"]
    # the same second line under an unrelated first line that holds no trigger word of it: not joined on
    assert "CONSUMER_GPU_P2P_BROKEN" not in _ids_of("Epoch 3 done\n'peer access is not supported between these two devices'\n")


def test_a_next_line_that_matches_alone_is_not_counted_twice_through_the_first():
    # both lines hold the signature's trigger: the second is found on its own, the join adds nothing
    log = ("RuntimeError: CUDA error: first\n"
           "cuda error: peer access is not supported between these two devices\n")
    ds = [d for d in _explain_all(log) if d.failure.id == "CONSUMER_GPU_P2P_BROKEN"]
    assert ds and {e.line for e in ds[0].evidence} == {2}


def _explain_all(text: str):
    import io as _io

    from ddpdoctor.logscan import explain_stream as _explain
    return _explain(_io.BytesIO(text.encode()), "t.log").diagnoses


def test_a_next_line_that_starts_a_new_message_is_not_joined_on():
    # the second line begins a new log record (capitalised, a level letter): not the rest of the first
    log = "RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus\nE1125 error. something else\n"
    assert "DATALOADER_SHM_BUS_ERROR" not in _ids_of(log)


def test_what_a_person_skips_before_a_line_is_stripped():
    from ddpdoctor.logscan.matcher import split_origin
    assert split_origin("> RuntimeError: x") == ("RuntimeError: x", None, None)            # a quoted paste
    assert split_origin("2024-12-04T07:19:22.472Z W1204 x")[0] == "W1204 x"               # a collector's timestamp
    assert split_origin("[2026-04-22 21:34:20] n1:2:3 [0] NCCL WARN x")[0] == "n1:2:3 [0] NCCL WARN x"
    assert split_origin("[80746] [rank0]:[E321 02:07:08] x") == ("[E321 02:07:08] x", None, 0)
    assert split_origin("stderr: ERROR:torch x")[0] == "ERROR:torch x"                     # accelerate's test runner
    assert split_origin("trainer/0 [1]:[W socket.cpp:558] x") == ("[W socket.cpp:558] x", None, 1)  # torchx


def test_a_line_copied_out_of_a_url_is_read_decoded():
    # spaces as %20 (a search link, a prefilled issue title): decoded when %20 outnumbers plain spaces
    d = top(b"import error\n\nlibtorch_cuda.so:%20undefined%20symbol:%20ncclCommRegister\n")
    assert d.failure.id == "NCCL_LIBRARY_CONFLICT" and d.evidence[0].line == 3
    assert d.evidence[0].text == "libtorch_cuda.so: undefined symbol: ncclCommRegister"


def test_one_percent_escape_in_an_ordinary_line_is_left_alone_and_newline_escapes_keep_the_numbering():
    data = b"saving to /data/my%20run/ckpt and /data/my%20run/log now\n" + SHM + b"\n"
    d = top(data)
    assert d.failure.id == "NCCL_SHM_TOO_SMALL" and d.evidence[0].line == 2
    blk = next(blocks(io.BytesIO(b"a%20b%0Ac%20d\nnext\n")))
    assert blk.data == b"a b c d\nnext\n"


def test_percent_decoding_is_linear_in_a_hostile_line():
    data = b"x" * (2 << 20) + b"%20" + b"y" * (2 << 20) + b"\n"   # one escape in a 4 MB line: left alone
    assert b"".join(b.data for b in blocks(io.BytesIO(data))) == data


def test_the_escape_finder_agrees_with_memmem(monkeypatch):
    from ddpdoctor.logscan import gatefind
    with_ac = gatefind.literal_finder(b"%20")
    monkeypatch.setenv("DDPDOCTOR_NO_AHOCORASICK", "1")
    without = gatefind.literal_finder(b"%20")
    for data in (b"", b"45%|####", b"a%20b", b"x" * 100000 + b"%2", b"%20" + b"y" * 100000):
        assert with_ac(data) == without(data) == (b"%20" in data)


def test_mpiruns_timestamped_tags_are_stripped_and_give_the_rank():
    # `mpirun --timestamp-output --tag-output` (orte/mca/iof/base: ctime() without its newline, then "[job,rank]<stdout>:")
    line = "Fri Aug 11 12:31:45 2023[1,3]<stdout>:node4:1850304:1881110 [3] NCCL INFO Bootstrap : Using ib0:10.0.0.4<0>"
    assert split_origin(line) == ("node4:1850304:1881110 [3] NCCL INFO Bootstrap : Using ib0:10.0.0.4<0>", "node4", 3)
    # --timestamp-output alone: "<ctime><stdout>:"
    assert split_origin("Mon Jan  8 09:01:02 2024<stderr>:RuntimeError: x")[0] == "RuntimeError: x"
    # a date in a message is not a prefix
    assert split_origin("Fri Aug 11 12:31:45 2023 job started")[0] == "Fri Aug 11 12:31:45 2023 job started"


def test_an_nccl_warn_line_names_its_host_like_an_info_line():
    # NCCL's WARN prefix puts file:line (and, from 2.30.7, the function) between the device and "NCCL WARN"
    assert split_origin("node7:55:61 [2] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'")[1] == "node7"
    assert split_origin("node7:55:61 [2] misc/socket.cc:71 (socketProgress) NCCL WARN x")[1] == "node7"
    assert split_origin("node7:55:61 [2] NCCL INFO x")[1] == "node7"

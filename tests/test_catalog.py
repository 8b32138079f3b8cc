"""The catalog of failure modes: complete, consistent, and every signature proven on its example."""
import re

import pytest

from ddpdoctor import catalog, registry
from ddpdoctor.catalog.model import CATEGORIES, GATES, FailureMode, Signature, literal_runs, required_literal
from ddpdoctor.logscan import default_matcher, explain_stream

# The 45 failure modes of shared/failure-catalog.md (the reference the catalog must cover).
REFERENCE_IDS = """
MASTER_PORT_IN_USE NODE_RANK_DUPLICATED RDZV_ENDPOINT_UNREACHABLE RDZV_HOST_NOT_SELF_RECOGNIZED RDZV_ID_MISMATCH
STANDALONE_WITH_MULTINODE STORE_BARRIER_WORKER_COUNT_MISMATCH NPROC_EXCEEDS_GPUS LOCAL_RANK_ARG_MISMATCH
LAUNCHER_NOT_ON_PATH HOST_OOM_SIGKILL WINDOWS_NO_NCCL_BACKEND WINDOWS_LIBUV_UNSUPPORTED HOSTNAME_RESOLVES_TO_LOOPBACK
HOSTNAME_UNRESOLVABLE MASTER_ADDR_MALFORMED K8S_DNS_NOT_READY WINDOWS_HOSTS_FILE_REVERSE_NAME FIREWALL_BLOCKS_PORTS
IPV6_ADDRESS_FAMILY MTU_MISMATCH NCCL_WRONG_INTERFACE_AUTOSELECTED NCCL_SOCKET_IFNAME_NOT_FOUND
GLOO_SOCKET_IFNAME_INVALID CONTAINER_BRIDGE_NETWORK NCCL_SHM_TOO_SMALL DEV_SHM_PERMISSION_DENIED
DATALOADER_SHM_BUS_ERROR IB_DEVICE_NOT_VISIBLE IB_MEMLOCK_LIMIT IB_ROCE_GID_MISMATCH NCCL_VERSION_MISMATCH_ACROSS_NODES
NCCL_P2P_ACS_IOMMU_HANG CONSUMER_GPU_P2P_BROKEN FABRIC_MANAGER_NOT_RUNNING NCCL_COLLECTIVE_TIMEOUT
SLURM_NTASKS_MISMATCH DUPLICATE_GPU_PER_RANK GLOBAL_RANK_USED_AS_DEVICE GPU0_EXTRA_MEMORY DDP_UNUSED_PARAMETERS
DEFAULT_PG_NOT_INITIALIZED COLLECTIVE_MISMATCH_ACROSS_RANKS UNEVEN_INPUTS_HANG CUDA_REINIT_IN_FORKED_SUBPROCESS
""".split()

FAILURES = list(catalog.failures().values())
SIGNATURES = [(fm, i, s) for fm in FAILURES for i, s in enumerate(fm.signatures)]


def test_reference_list_is_the_45_modes():
    assert len(REFERENCE_IDS) == len(set(REFERENCE_IDS)) == 45


def test_catalog_covers_every_reference_failure_mode():
    missing = sorted(set(REFERENCE_IDS) - set(catalog.failures()))
    assert not missing, f"reference failure modes missing from the catalog: {missing}"


def test_entries_found_beyond_the_reference_say_so():
    for fm in FAILURES:
        assert (fm.origin == "reference") == (fm.id in REFERENCE_IDS), (
            f"ddpdoctor/catalog/modes/{fm.id}.toml: write origin = 'ddpdoctor' (a mode beyond the 45 of "
            "shared/failure-catalog.md; new-mode writes it)" if fm.id not in REFERENCE_IDS else
            f"ddpdoctor/catalog/modes/{fm.id}.toml: one of the 45 reference modes: remove its origin line")


@pytest.mark.parametrize("fm", FAILURES, ids=lambda fm: fm.id)
def test_every_failure_mode_is_complete(fm: FailureMode):
    assert fm.title and fm.summary and fm.cause, fm.id
    assert fm.category in CATEGORIES
    assert fm.fix.summary, "a fix needs a summary"
    assert fm.signatures, "a failure mode without log signatures cannot be explained from a log"
    assert fm.confirm, "say how to confirm it"
    assert fm.checks or fm.preflight, "say how to catch it before a run (checks, or what is missing)"
    for rel in fm.related:
        assert rel in catalog.failures() and rel != fm.id, rel


@pytest.mark.parametrize("fm", FAILURES, ids=lambda fm: fm.id)
def test_every_referenced_check_is_registered(fm: FailureMode):
    known = registry.load_all()
    unknown = [c for c in fm.checks if c not in known]
    assert not unknown, f"{fm.id} names checks that do not exist: {unknown}"


def test_fix_env_holds_only_concrete_values():
    # Fix.env is exported verbatim by consumers such as the Slurm task prolog: no placeholders.
    for fm in FAILURES:
        for k, v in fm.fix.env.items():
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*", k) and "<" not in v and "{" not in v, (fm.id, k, v)


@pytest.mark.parametrize("fm,i,sig", SIGNATURES, ids=lambda x: getattr(x, "id", None) or str(x)[:0])
def test_signature_matches_its_example_through_its_trigger(fm: FailureMode, i: int, sig: Signature):
    assert sig.example, f"{fm.id} signature {i} has no example line"
    assert re.search(sig.pattern, sig.example), f"{fm.id} signature {i} does not match its example"
    assert any(t in sig.example.lower() for t in sig.triggers), f"{fm.id} #{i}: trigger {sig.triggers} not in example"
    for t in sig.triggers:
        assert len(t.strip()) >= 4, f"{fm.id} #{i}: trigger {t!r} is too short to be rare"


@pytest.mark.parametrize("fm,i,sig", [x for x in SIGNATURES if x[2].role == "cause"],
                         ids=lambda x: getattr(x, "id", None) or str(x)[:0])
def test_example_line_alone_names_its_failure_mode(fm, i, sig):
    """Scanned as a one-line log, the example of a cause signature is explained by its failure mode among
    the first three diagnoses (shared symptoms and clues only decide together with other lines)."""
    import io
    log = (sig.example + "\n").encode()
    ids = [d.failure.id for d in explain_stream(io.BytesIO(log)).diagnoses]
    assert fm.id in ids[:3], (fm.id, i, ids)


def test_gates_are_rare_in_healthy_logs_because_every_gated_line_is_looked_at_again():
    # A new signature needs no edit of GATES: its trigger becomes a gate when it holds no shared word.
    # What must hold is that gates stay rare in healthy output, or every line becomes a candidate.
    from pathlib import Path
    m = default_matcher()
    shared = [g.encode() for g in GATES]
    # every shared word is searched, maybe widened to the piece all its triggers share (never commoner)
    assert all(any(g in gate for gate in m.gates) for g in shared)
    lines = [ln.lower().encode() for p in sorted((Path(__file__).parent / "logs" / "none").iterdir())
             for ln in p.read_text(errors="replace").splitlines()]
    for gate in [g for g in m.gates if not any(s in g for s in shared)]:  # shared ones: the benchmark
        hits = sum(gate in ln for ln in lines)
        assert hits <= max(3, len(lines) // 20), (gate, hits)


def test_more_gate_words_than_one_fast_automaton_takes_find_the_same_lines():
    # ahocorasick_rs (the Rust aho-corasick crate) keeps its SIMD (Teddy) prefilter for at most 64 patterns; one
    # gate more made the gate pass 1.6x slower (issue 23), so the line-finding pass deals the gates into the fewest
    # groups of at most 64, of even sizes (a small remainder group can lose Teddy too: gatefind.groups): with 64+
    # words the hits are those of the memmem passes, as with fewer.
    from ddpdoctor.logscan import gatefind
    m = default_matcher()
    if m._ac is None:
        pytest.skip("ahocorasick_rs not installed")
    extra = [f"zzgate{i:03d}".encode() for i in range(70)]
    m._gate_list = sorted(m._gate_list + extra, key=len)
    m._ac = gatefind._automaton(m._gate_list)
    assert len(m._ac[0]) == -(-len(m._gate_list) // gatefind.TEDDY_MAX) >= 2
    sizes = [len(g) for g in gatefind.groups(m._gate_list)]
    assert sum(sizes) == len(m._gate_list) and max(sizes) <= gatefind.TEDDY_MAX and max(sizes) - min(sizes) <= 1
    log = b"".join(p.read_bytes().lower() for p in sorted((Path(__file__).parent / "logs").rglob("*.log"))[:60])
    log += b"\nrank 3: zzgate069 then zzgate000 and timed out\n"
    hits = sorted(m._ac_gate_hits(log))
    assert hits == sorted(m._gate_hits(log, m._gate_list))
    assert {g for *_, g in hits} >= {b"zzgate069", b"zzgate000"}


def test_required_literal_prefers_runs_with_a_gate_word():
    pat = r"Timed out after \d+ seconds waiting for clients\. (?P<j>\d+)/\d+ clients joined"
    assert literal_runs(pat)[0] == "timed out after "
    assert required_literal(pat) == "timed out after "
    assert required_literal(r"(?:a|b)c?") == ""


def test_failure_ids_are_unique_upper_snake():
    ids = [fm.id for fm in FAILURES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", i) for i in ids)


def test_failures_for_check_is_the_inverse_of_checks():
    for fm in FAILURES:
        for c in fm.checks:
            assert fm in catalog.failures_for_check(c)


# -- the catalog as data (catalog/modes/*.toml, catalog/load.py)

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from ddpdoctor.catalog import load  # noqa: E402
from ddpdoctor.logscan.native import SIGNATURES_USED as NATIVE_USED  # noqa: E402
from ddpdoctor.logscan.rules import SIGNATURES_USED  # noqa: E402


def test_every_mode_is_one_toml_file_named_for_its_id():
    files = sorted(p.stem for p in load.MODES_DIR.glob("*.toml"))
    assert files == sorted(catalog.failures()), "one file per failure mode, named <ID>.toml"


def test_signature_names_are_unique_within_a_mode():
    for fm in FAILURES:
        names = [s.name for s in fm.signatures]
        assert all(names) and len(set(names)) == len(names), fm.id


def test_cross_line_rules_refer_only_to_signatures_that_exist():
    by_mode = {fm.id: {s.name for s in fm.signatures} for fm in FAILURES}
    every = set().union(*by_mode.values())
    for fid, name in SIGNATURES_USED + NATIVE_USED:
        assert name in (every if fid == "*" else by_mode[fid]), (fid, name)


def _copy_catalog(tmp_path: Path) -> Path:
    modes = tmp_path / "modes"
    shutil.copytree(load.MODES_DIR, modes)
    shutil.copy(load.SHARED_FILE, tmp_path / "shared.toml")
    return modes


GOOD = """id = 'MY_NEW_FAILURE'
title = 't'
category = 'gpu'
summary = 's'
cause = 'c'
[fix]
summary = 'f'
[[signatures]]
name = 'MY_ERROR'
pattern = 'my special error (?P<n>\\d+)'
weight = 0.7
example = 'RuntimeError: my special error 42'
"""


def test_a_new_mode_is_one_file_and_no_constant(tmp_path):
    modes = _copy_catalog(tmp_path)
    (modes / "MY_NEW_FAILURE.toml").write_text(GOOD)
    cat = load.load_catalog(modes, tmp_path / "shared.toml")
    assert cat["MY_NEW_FAILURE"].signatures[0].name == "MY_ERROR"
    assert cat["MY_NEW_FAILURE"].signatures[0].trigger == "my special error "


@pytest.mark.parametrize("edit,message", [
    (lambda t: t + "\nbogus = 1\n", "unknown key 'bogus'"),
    (lambda t: t.replace("weight = 0.7", "weight = 'high'"), "'weight' has the wrong type"),
    (lambda t: t.replace("weight = 0.7", "weight = 1.5"), "out of (0, 1]"),
    (lambda t: t.replace("(?P<n>\\d+)", "(?P<n>\\d+"), "bad pattern"),
    (lambda t: t.replace("42'", "x'"), "does not match its example"),
    (lambda t: t.replace("category = 'gpu'", "category = 'gpus'"), "category 'gpus'"),
    (lambda t: t.replace("cause = 'c'\n", ""), "missing 'cause'"),
    (lambda t: t.replace("pattern = ", "use = 'NO_SUCH'\npattern = "), "exactly one of 'pattern' or 'use'"),
    (lambda t: t.replace("pattern = 'my special error (?P<n>\\d+)'", "use = 'NO_SUCH'"), "not in shared.toml"),
    (lambda t: t + t[t.index("[[signatures]]"):], "used twice"),
    (lambda t: t.replace("id = 'MY_NEW_FAILURE'", "id = 'OTHER_FAILURE'"), "differs from the file name"),
    (lambda t: t.replace("[fix]", "[fix\n"), "not valid TOML"),
])
def test_a_bad_mode_file_is_a_clear_error_naming_the_file(tmp_path, edit, message):
    modes = _copy_catalog(tmp_path)
    (modes / "MY_NEW_FAILURE.toml").write_text(edit(GOOD))
    with pytest.raises(load.CatalogError) as e:
        load.load_catalog(modes, tmp_path / "shared.toml")
    assert "MY_NEW_FAILURE.toml" in str(e.value) and message in str(e.value), str(e.value)


def test_the_example_in_the_authoring_guide_loads(tmp_path):
    text = (Path(__file__).parents[1] / "docs" / "writing-a-failure-mode.md").read_text()
    start = text.index("```toml", text.index("## The file")) + len("```toml")
    example = text[start:text.index("```", start)]
    modes = _copy_catalog(tmp_path)
    (modes / "HOSTNAME_RESOLVES_TO_LOOPBACK.toml").write_text(example)
    fm = load.load_catalog(modes, tmp_path / "shared.toml")["HOSTNAME_RESOLVES_TO_LOOPBACK"]
    assert [s.name for s in fm.signatures] == ["REMOTE_LOOPBACK", "STORE_CONNECT_TIMEOUT"]


def test_widened_gates_still_find_every_trigger():
    # A gate is widened to the longest piece its triggers share: each trigger must still contain its gate,
    # or a line holding that trigger would never be looked at.
    m = default_matcher()
    for gate, by_trigger in m.gates.items():
        assert all(gate in trigger for trigger in by_trigger), gate
    from ddpdoctor.logscan.gatefind import widen as _widen
    assert _widen(b"signal", [b"signal 9 (sigkill) received by pid", b"signal 7 (sigbus) received by pid"]) == b"signal "
    assert _widen(b"fail", [b"failed to", b"fail"]) == b"fail"

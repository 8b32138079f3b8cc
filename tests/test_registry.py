"""Every check is documented, ids are stable and well-formed, categories match their digit."""
import pytest

from ddpdoctor import registry


def test_every_check_has_the_three_doc_sections():
    checks = registry.load_all()
    assert len(checks) >= 20
    for c in checks.values():
        for section in registry.DOC_SECTIONS:
            assert c.doc_section(section), f"{c.id} lacks '## {section}'"


def test_ids_match_their_category_digit():
    for c in registry.load_all().values():
        assert registry.ID_RE.match(c.id)
        assert registry.CATEGORY_DIGIT[c.id[2]] == c.category


def test_registering_a_bad_id_or_category_is_refused():
    with pytest.raises(ValueError):
        registry.check("DD1", "x", category="reachability")
    with pytest.raises(ValueError):
        registry.check("DD201", "x", category="nic")


def test_select_by_prefix_and_ignore():
    ids = [c.id for c in registry.select("network", select=["DD2"], ignore=["DD206"])]
    assert ids and all(i.startswith("DD2") for i in ids) and "DD206" not in ids


def test_a_misspelled_tag_is_refused_at_registration():
    with pytest.raises(ValueError, match="name no command"):
        registry.check("DD199", "x", category=registry.CATEGORY_DIGIT["1"], tags={"netwrok"})


def test_every_tag_a_check_uses_is_a_command_that_exists():
    from ddpdoctor import commands
    used = {t for c in registry.load_all().values() for t in c.tags}
    assert used and used <= set(commands.BY_NAME), sorted(used - set(commands.BY_NAME))
    assert registry.COMMAND_TAGS >= used


def test_a_tag_of_a_command_that_runs_no_checks_is_refused():
    with pytest.raises(ValueError, match="name no command that runs checks"):
        registry.check("DD199", "x", category="reachability", tags={"explain"})


def test_a_check_reading_another_context_than_its_command_hands_it_is_refused():
    from ddpdoctor.facts.network import NetworkFacts
    with pytest.raises(ValueError, match="smoke hands its checks a SmokeWorld"):
        registry.check("DD199", "x", category="reachability", tags={"smoke"}, context=NetworkFacts)
    # and unrelated contexts without saying which one it reads
    with pytest.raises(ValueError, match="unrelated contexts"):
        registry.check("DD199", "x", category="reachability", tags={"network", "cluster"})
    assert "DD199" not in registry.REGISTRY


def test_a_check_reading_a_base_of_its_commands_context_is_accepted():
    from ddpdoctor.facts.network import NetworkFacts
    from ddpdoctor.facts.node import PrologFacts
    assert registry._context_of(frozenset({"network", "prolog"}), None, "DD199") is NetworkFacts
    assert registry._context_of(frozenset({"prolog"}), NetworkFacts, "DD199") is NetworkFacts
    assert registry._context_of(frozenset({"prolog"}), None, "DD199") is PrologFacts


def test_every_registered_check_reads_what_its_commands_hand_it():
    for c in registry.load_all().values():
        for t in c.tags:
            assert issubclass(registry.commands.get(t).load_context_type(), c.context), (c.id, t)


def test_every_check_module_is_found_and_registers_checks():
    """No hand list: a new file in ddpdoctor/checks/ is imported by load_all; each one holds checks."""
    import importlib
    from pathlib import Path
    on_disk = {f"ddpdoctor.checks.{p.stem}" for p in (Path(registry.__file__).parent / "checks").glob("*.py")
               if not p.stem.startswith("_")}
    assert set(registry.check_modules()) == on_disk
    homes = {c.func.__module__ for c in registry.load_all().values()}
    # drift.py holds the fingerprint comparison that DD505 and DD720 share, hostsfile.py the /etc/hosts
    # edits DD2xx and DD712 suggest (tests/test_fix_commands.py): no check of their own
    assert on_disk - homes == {"ddpdoctor.checks.drift", "ddpdoctor.checks.hostsfile"}, sorted(on_disk - homes)


def test_list_checks_is_sorted_by_id():
    from click.testing import CliRunner
    from ddpdoctor.cli.list_checks import list_checks
    checks = CliRunner().invoke(list_checks, []).output.split("\n\n")[0]  # lint rules and failure modes follow
    ids = [line.split()[0] for line in checks.splitlines() if line.strip()]
    assert len(ids) == len(registry.load_all()) and ids == sorted(ids)


def test_every_finding_kind_is_a_word_a_site_can_silence():
    """kind= literals in checks/ fit siteconfig's finding-id grammar (else [checks] silenced could not name them)."""
    import ast
    import re
    from pathlib import Path
    from ddpdoctor.model import DEFAULT_KIND, KIND_RE
    kinds = set()
    for p in (Path(registry.__file__).parent / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "kind" and isinstance(node.value, ast.Constant):
                kinds.add(node.value.value)
    assert len(kinds) > 20  # the walker finds them
    bad = sorted(k for k in kinds | {DEFAULT_KIND} if not re.fullmatch(KIND_RE, k))
    assert not bad, bad

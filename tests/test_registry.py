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
    from ddpdoctor.cli import LAZY_COMMANDS
    used = {t for c in registry.load_all().values() for t in c.tags}
    assert used and used <= set(LAZY_COMMANDS), sorted(used - set(LAZY_COMMANDS))
    assert registry.COMMAND_TAGS >= used


def test_list_checks_is_sorted_by_id():
    from click.testing import CliRunner
    from ddpdoctor.cli.list_checks import list_checks
    ids = [line.split()[0] for line in CliRunner().invoke(list_checks, []).output.splitlines() if line.strip()]
    assert len(ids) == len(registry.load_all()) and ids == sorted(ids)

"""checks/ is generated from the code (failure modes and check docstrings) and must stay in sync."""
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor import catalog, registry
from ddpdoctor.catalog import gendocs, pages

REPO = Path(__file__).resolve().parents[1]
CHECKS_DIR = REPO / "docs" / "reference" / "checks"


def test_checks_folder_is_in_sync_with_the_code():
    missing, stale, orphaned = gendocs.diff(CHECKS_DIR)
    assert not (missing or stale or orphaned), (
        f"checks/ is out of date (missing {missing}, stale {stale}, orphaned {orphaned}); "
        "run: python -m ddpdoctor.catalog.gendocs")


def test_one_page_per_failure_mode_and_per_check_plus_an_index():
    want = set(pages.expected_pages())
    assert {"README.md", "versions.md"} <= want
    assert {f"{i}.md" for i in catalog.failures()} <= want
    assert {f"{i}.md" for i in registry.load_all()} <= want
    assert len(want) == 2 + len(catalog.failures()) + len(registry.load_all())


def test_the_versions_page_lists_torch_templates_per_mode():
    page = pages.versions_page()
    assert "| [NCCL_COLLECTIVE_TIMEOUT](NCCL_COLLECTIVE_TIMEOUT.md) | NCCL_WATCHDOG | pytorch/pytorch |" in page
    assert "NVIDIA/nccl" in page and "pytorch/gloo" in page


@pytest.mark.torchjob
def test_gendocs_check_reports_missing_stale_and_orphaned_pages(tmp_path):
    def check():
        return subprocess.run([sys.executable, "-m", "ddpdoctor.catalog.gendocs", "--check", "--dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)

    assert check().returncode == 1  # empty folder: everything missing
    subprocess.run([sys.executable, "-m", "ddpdoctor.catalog.gendocs", "--dir", str(tmp_path)], check=True,
                   capture_output=True, timeout=60)
    assert check().returncode == 0
    page = tmp_path / "FIREWALL_BLOCKS_PORTS.md"
    page.write_text(page.read_text() + "hand edit\n")
    (tmp_path / "DD999.md").write_text("# a check that does not exist\n")
    p = check()
    assert p.returncode == 1
    assert "stale: " in p.stdout and "FIREWALL_BLOCKS_PORTS.md" in p.stdout
    assert "orphaned: " in p.stdout and "DD999.md" in p.stdout


def test_failure_page_has_every_section_and_links_its_checks():
    page = pages.failure_page(catalog.get("HOSTNAME_RESOLVES_TO_LOOPBACK"), links=True)
    for section in ("## What you see", "## Why it happens", "## Fix", "## Catch it before the next run",
                    "## Log signatures"):
        assert section in page
    assert "[DD202](DD202.md)" in page


def test_check_page_lists_the_failure_modes_it_catches():
    page = pages.check_page(registry.get("DD302"), links=True)
    assert "## What it checks" in page and "[GLOO_SOCKET_IFNAME_INVALID](GLOO_SOCKET_IFNAME_INVALID.md)" in page

"""The human renderer, pinned: symbols, fix lines, footer, colour only when asked."""
from ddpdoctor.model import CheckResult, Finding, Fix, Report, Severity, Status
from ddpdoctor.render import text


def report():
    fix = Fix("make Gloo use eth0", ("ip route get 198.18.1.1",), {"GLOO_SOCKET_IFNAME": "eth0"})
    return Report("network", "node2", (
        CheckResult("DD201", "this host's name resolves", "dns", Status.PASS, 0.001,
                    (Finding(Severity.INFO, "node2 -> 198.18.1.2 (1 ms)"),)),
        CheckResult("DD303", "Gloo's default interface reaches the master", "nic", Status.FAIL, 0.002,
                    (Finding(Severity.ERROR, "Gloo would bind 198.18.0.2 on decoy0", hint="peers dial it", fix=fix),)),
        CheckResult("DD101", "the master answers ping", "reachability", Status.SKIP, 0.0, (), "this host is the master"),
        CheckResult("DD102", "port", "reachability", Status.TIMEOUT, 2.0, (), "no verdict within its 2 s timeout"),
        CheckResult("DD104", "route", "reachability", Status.CRASH, 0.0, (), "ddpdoctor bug, please report: KeyError"),
    ), 0.034)


def test_text_report_is_pinned():
    assert text.render(report()) == (
        "ddpdoctor network on node2\n"
        "✓ DD201 this host's name resolves\n"
        "    node2 -> 198.18.1.2 (1 ms)\n"
        "✗ DD303 Gloo's default interface reaches the master\n"
        "    error: Gloo would bind 198.18.0.2 on decoy0\n"
        "      peers dial it\n"
        "      fix: make Gloo use eth0\n"
        "        $ export GLOO_SOCKET_IFNAME=eth0\n"
        "        $ ip route get 198.18.1.1\n"
        "- DD101 the master answers ping (skip: this host is the master)\n"
        "⏱ DD102 port (timeout: no verdict within its 2 s timeout)\n"
        "☠ DD104 route (crash: ddpdoctor bug, please report: KeyError)\n"
        "\n"
        "1 failed, 1 timed out, 1 crashed, 1 passed, 1 skipped in 0.03s\n")


def test_colour_only_on_a_tty_and_never_with_no_color(monkeypatch):
    class Tty:
        encoding = "utf-8"

        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert text.use_colour(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not text.use_colour(Tty())
    assert "\x1b[" in text.render(report(), colour=True) and "\x1b[" not in text.render(report())


def test_ascii_symbols_when_the_stream_cannot_take_unicode():
    out = text.render(report(), unicode=False)
    assert "X DD303" in out and "✗" not in out

"""Commands that edit /etc/hosts, for findings to suggest: precise, and safe to paste as root.

Rules the commands follow (tests/test_fix_commands.py runs each on copies of real layouts):
- A name is matched as a whole entry of a line, never as a substring (`vm` never touches
  `myvm-builder` or `vm.example.com`), case-insensitively as glibc's files backend compares names
  (nss/nss_files/files-hosts.c: __strcasecmp), and only before a `#`, where glibc cuts the line
  (nss/nss_files/files-parse.c).
- Only that name leaves the line: `127.0.0.1 localhost localhost.localdomain vm` keeps localhost;
  a line whose only name it was is commented out whole (an address with no name maps nothing).
- The file is rewritten in place with `cp` (it follows a symlink and works on Docker's bind-mounted
  /etc/hosts, where `sed -i`'s rename fails with EBUSY), only after sed succeeded, with a backup.
- Portable sed: -E, POSIX classes, `t` loops; no GNU-only flags (`I`), so BSD sed behaves the same.
- A line is appended after a newline: a file without a trailing newline keeps its last line.
"""
from __future__ import annotations

import re

HOSTS = "/etc/hosts"
BACKUP = "/etc/hosts.ddpdoctor.bak"
LOOPBACK = r"127\.[0-9]+\.[0-9]+\.[0-9]+|::1"  # the loopback entries /etc/hosts layouts use

_SAFE = re.compile(r"^[A-Za-z0-9._:-]+$")  # what may appear in a name or address inside the sed script


def _name_re(name: str) -> str:
    """`name` as an ERE that matches it exactly and in any case, without sed's GNU-only `I` flag."""
    out = []
    for ch in name:
        if ch.isalpha():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch == ".":
            out.append(r"\.")
        else:
            out.append(ch)
    return "".join(out)


def _addr_re(addrs: tuple[str, ...]) -> str:
    return "|".join(a.replace(".", r"\.") for a in addrs)


def sed_script(name: str, addr_re: str = LOOPBACK) -> str:
    """The sed -E program that removes `name` from the lines whose address matches `addr_re`."""
    n, a, sp = _name_re(name), addr_re, "[[:space:]]"
    only = f"s/^({sp}*({a})({sp}+{n})+{sp}*(#.*)?)$/# \\1/"
    # one occurrence per pass: the tokens before it (none of them a comment) stay, then what follows
    strip = f"s/^({sp}*({a})({sp}+[^#[:space:]]+)*){sp}+{n}({sp}|#|$)/\\1\\4/"
    return f"-e '{only}' -e ':a' -e '{strip}' -e 'ta'"


def unmap_command(name: str, addrs: tuple[str, ...] | None = None, path: str = HOSTS) -> str | None:
    """A command that removes `name` from the /etc/hosts lines of `addrs` (default: loopback ones),
    or None when the name or an address could not be pasted safely into the command."""
    if not name or not _SAFE.match(name) or any(not _SAFE.match(a) for a in addrs or ()):
        return None
    addr_re = _addr_re(addrs) if addrs else LOOPBACK
    return (f"t=$(mktemp) && sed -E {sed_script(name, addr_re)} {path} > \"$t\" && "
            f"sudo cp {path} {BACKUP} && sudo cp \"$t\" {path} && rm -f \"$t\"")


def append_line_command(line: str, path: str) -> str:
    """Appends `line` (a constant of ours, no single quote) to `path`, after a newline."""
    if "'" in line or "\n" in line:
        raise ValueError(f"not a line to paste in single quotes: {line!r}")
    return f"printf '\\n%s\\n' '{line}' | sudo tee -a {path} >/dev/null"


def append_command(addr: str, name: str, path: str = HOSTS) -> str | None:
    """A command that appends `addr name` to /etc/hosts (after a newline: a last line without one
    would otherwise swallow the entry), or None when either cannot be pasted safely."""
    if not (addr and name and _SAFE.match(addr) and _SAFE.match(name)):
        return None
    return append_line_command(f"{addr} {name}", path)


def append_placeholder_command(var: str, name: str, path: str = HOSTS) -> str | None:
    """Appends `$var name`, refusing to run (bash's ${var:?}) until the user sets `var`: a
    placeholder such as '<master-ip>' pasted as is would write a line glibc cannot parse."""
    if not (name and _SAFE.match(name) and re.fullmatch(r"[A-Z_]+", var)):
        return None
    return (f"printf '\\n%s\\n' \"${{{var}:?set {var} to the address of {name} first}} {name}\" "
            f"| sudo tee -a {path} >/dev/null")

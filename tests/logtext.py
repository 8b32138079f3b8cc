"""explain on a few log lines, as the explain tests write them (one line each, a final newline), and the two
readings of its answer they assert on; and which signatures the scanner reaches on one line."""
import io

from ddpdoctor.logscan import explain_stream


def explain(lines):
    return explain_stream(io.BytesIO(("\n".join(lines) + "\n").encode()), "t")


def ids(ex):
    return [d.failure.id for d in ex.diagnoses]


def by_id(ex, fid):
    return next(d for d in ex.diagnoses if d.failure.id == fid)


def found(matcher, line: str) -> set[tuple[str, str]]:
    """(mode, signature) pairs the scanner reaches on `line`, through its gate pass as `explain --log` does."""
    out = set()
    for lm in matcher.scan(io.BytesIO((line + "\n").encode())):
        for rule, _groups in lm.matches:
            if rule.failure is not None and rule.signature is not None:
                out.add((rule.failure.id, rule.signature.name))
    return out

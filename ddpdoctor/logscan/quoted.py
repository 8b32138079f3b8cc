"""One line of the log as a diagnosis quotes it: its number, its text, and the host and rank that wrote it. Apart
from evidence.py's tallies so that user_error.py (which evidence.Collector builds) can name it without a circle."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)   # one per matched line: cheaper to make and to read
class Evidence:
    line: int
    text: str
    host: str | None
    rank: int | None
    note: str = ""

    def to_dict(self) -> dict:
        d: dict = {"line": self.line, "text": self.text}
        if self.host:
            d["host"] = self.host
        if self.rank is not None:
            d["rank"] = self.rank
        if self.note:
            d["note"] = self.note
        return d

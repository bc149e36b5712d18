"""Progress on a terminal: the bar counts bytes, then says that extraction goes on."""

from __future__ import annotations

import io

from cudaredist.progress import PlainLines, TqdmBar, pick


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_says_extraction_goes_on_once_the_bytes_are_in() -> None:
    term = Terminal()
    bar = pick(quiet=False, verbose=False, stream=term)
    assert isinstance(bar, TqdmBar)
    bar.start(1000, 2)
    bar.advance(600)
    bar.archive_done("a.tar.xz", 600, cached=False)
    assert "fetched 1/2 archives" in term.getvalue()
    bar.advance(400)
    bar.archive_done("b.tar.xz", 400, cached=True)
    shown = term.getvalue()
    assert "extracting: 0/2 done" in shown  # at 100% of the bytes, not silent
    assert "downloaded a.tar.xz" in shown and "cached     b.tar.xz" in shown
    bar.extracted("a.tar.xz")
    assert "extracting: 1/2 done" in term.getvalue()
    bar.close()


def test_a_log_gets_plain_lines_without_carriage_returns() -> None:
    log = io.StringIO()
    lines = pick(quiet=False, verbose=False, stream=log)
    assert isinstance(lines, PlainLines) and not isinstance(lines, TqdmBar)
    lines.start(1000, 1)
    lines.archive_done("a.tar.xz", 1000, cached=False)
    lines.extracted("a.tar.xz")
    assert "\r" not in log.getvalue() and log.getvalue().count("\n") == 2

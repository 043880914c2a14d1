"""Text from data, made safe for a terminal, and the CLI's warning lines.

A trace, a spec or a file name someone shared may hold terminal commands (an ESC sequence that
clears the screen, sets the title or writes the clipboard; U+202E, which shows "exe.txt" for
"txt.exe"). Everything the CLI prints from data goes through `safe_text`: shown, never
interpreted. Light on purpose (no rich, no numpy): the entry point uses it before any command
is imported.
"""

from __future__ import annotations

import re

import click

# C0 and C1 control characters but newline and tab, DEL, and the marks, overrides and isolates
# that reorder what a terminal shows.
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {chr(c): f"\\x{c:02x}" for c in _CONTROLS} | {chr(c): f"\\u{c:04x}" for c in _BIDI}
_UNSAFE = re.compile("[" + "".join(re.escape(c) for c in _ESCAPES) + "]")


def safe_text(text: str) -> str:
    """`text` with control characters (but newline and tab) and bidirectional overrides shown
    as escapes (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(lambda m: _ESCAPES[m.group()], text) if _UNSAFE.search(text) else text


def safe_line(text: str) -> str:
    """`safe_text` as one line: its lines joined with "; " (a message that spans lines could pass
    for output of its own)."""
    return "; ".join(part.strip() for part in safe_text(str(text)).splitlines() if part.strip())


#: Warning lines one run prints at most; the others are counted (`warnings_left`).
MAX_WARNINGS = 50
_count = {"shown": 0, "hidden": 0}
_seen: set[str] = set()


def echo_warning(message: str) -> None:
    """`warning: <message>` on stderr as one escaped line; each distinct message once, and at
    most `MAX_WARNINGS` lines a run (a trace of 100,000 odd groups must not print 100,000)."""
    line = safe_line(message) or "(no message)"
    if line in _seen:
        return
    _seen.add(line)
    if _count["shown"] >= MAX_WARNINGS:
        _count["hidden"] += 1
        return
    _count["shown"] += 1
    click.echo(f"warning: {line}", err=True)


def warnings_left() -> int:
    """Distinct warnings not shown (past `MAX_WARNINGS`) since `reset_warnings`."""
    return _count["hidden"]


def reset_warnings() -> None:
    _count.update(shown=0, hidden=0)
    _seen.clear()


_NUMERIC = re.compile(r"(invalid value|overflow|divide by zero|underflow) encountered|empty slice|Degrees of freedom")


def python_warning(message: Warning | str, category: type[Warning]) -> str:
    """What a Python warning says to a CLI user: its message, without the source file and line
    Python would print; numpy's arithmetic warnings said in words (a NaN, an infinity or a
    number too large in the input spreads to the figures computed from it)."""
    text = str(message)
    if issubclass(category, RuntimeWarning) and _NUMERIC.search(text):
        return (
            f"arithmetic on values out of range ({text}): the input holds NaN, infinite or too large "
            "numbers; figures computed from them may be NaN or wrong"
        )
    return text

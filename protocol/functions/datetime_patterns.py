"""Spark's datetime patterns (``yyyy-MM-dd HH:mm:ss``) for formatting and parsing.

sqlglot hands a pattern over in strftime spelling (``%Y-%mstrict-%dstrict``);
:func:`tokens` reads that spelling back into Spark's pattern letters.

Invariants:
- Supported letters: ``y yy yyyy M MM MMM MMMM d dd D DDD H HH h hh m mm s ss
  S...`` (fraction), ``a``, ``E``/``EEE``/``EEEE``; anything else is refused
  (:class:`UnsupportedExpressionError`), never formatted differently.
- Parsing is strict as Spark's default parser is: padded fields need their
  full width, the whole text must be consumed, and the date must exist.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re

from raydelta.protocol.errors import UnsupportedExpressionError

_STRFTIME: dict[str, str] = {
    "%Y": "yyyy",
    "%y": "yy",
    "%mstrict": "MM",
    "%m": "MM",
    "%-m": "M",
    "%dstrict": "dd",
    "%d": "dd",
    "%-d": "d",
    "%Hstrict": "HH",
    "%H": "HH",
    "%-H": "H",
    "%Istrict": "hh",
    "%I": "hh",
    "%-I": "h",
    "%Mstrict": "mm",
    "%M": "mm",
    "%-M": "m",
    "%Sstrict": "ss",
    "%S": "ss",
    "%-S": "s",
    "%p": "a",
    "%a": "EEE",
    "%A": "EEEE",
    "%b": "MMM",
    "%B": "MMMM",
    "%-j": "D",
    "%j": "DDD",
    "%%": "%",
}
_TOKEN = re.compile(
    "|".join(re.escape(k) for k in sorted(_STRFTIME, key=len, reverse=True)) + r"|S+|[A-Za-z]|."
)
DEFAULT = "%Y-%mstrict-%dstrict %Hstrict:%Mstrict:%Sstrict"


def tokens(strftime: str | None, sql: str) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs: kind ``field`` with a Spark letter run, or ``text``."""
    if strftime is None:
        raise UnsupportedExpressionError(f"a datetime pattern with quoted text in {sql!r}", sql)
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(strftime):
        piece = match.group()
        if piece in _STRFTIME:
            letters = _STRFTIME[piece]
            out.append(("text", "%") if letters == "%" else ("field", letters))
        elif piece[0] == "S":
            out.append(("field", piece))
        elif piece.isalpha():
            raise UnsupportedExpressionError(
                f"the datetime pattern letter {piece!r} in {sql!r}", sql
            )
        else:
            out.append(("text", piece))
    return out


def format_datetime(value: dt.datetime, pattern: list[tuple[str, str]]) -> str:
    parts: list[str] = []
    for kind, text in pattern:
        parts.append(text if kind == "text" else _field(value, text))
    return "".join(parts)


def _field(v: dt.datetime, letters: str) -> str:
    hour12 = v.hour % 12 or 12
    simple: dict[str, str] = {
        "yyyy": f"{v.year:04d}",
        "yy": f"{v.year % 100:02d}",
        "MM": f"{v.month:02d}",
        "M": str(v.month),
        "MMM": calendar.month_abbr[v.month],
        "MMMM": calendar.month_name[v.month],
        "dd": f"{v.day:02d}",
        "d": str(v.day),
        "DDD": f"{v.timetuple().tm_yday:03d}",
        "D": str(v.timetuple().tm_yday),
        "HH": f"{v.hour:02d}",
        "H": str(v.hour),
        "hh": f"{hour12:02d}",
        "h": str(hour12),
        "mm": f"{v.minute:02d}",
        "m": str(v.minute),
        "ss": f"{v.second:02d}",
        "s": str(v.second),
        "a": "AM" if v.hour < 12 else "PM",
        "EEE": calendar.day_abbr[v.weekday()],
        "EEEE": calendar.day_name[v.weekday()],
    }
    if letters in simple:
        return simple[letters]
    if letters[0] == "S":
        return f"{v.microsecond:06d}"[: len(letters)].ljust(len(letters), "0")
    raise ValueError(letters)


_WIDTHS = {"yyyy": r"\d{4}", "yy": r"\d{2}", "MM": r"\d{2}", "M": r"\d{1,2}", "dd": r"\d{2}"}


def parser(pattern: list[tuple[str, str]]) -> re.Pattern[str]:
    """A regular expression with one named group per field of ``pattern``."""
    parts: list[str] = []
    seen: set[str] = set()
    for kind, text in pattern:
        if kind == "text":
            parts.append(re.escape(text))
            continue
        name = {"yyyy": "y4", "yy": "y2", "MMM": "mon", "MMMM": "month", "a": "ampm"}.get(
            text, text[0] if text[0] != "S" else "frac"
        )
        name = {"M": "mo", "m": "mi", "h": "h12"}.get(name, name)
        if name in seen:
            raise UnsupportedExpressionError(f"a pattern repeating {text!r}")
        seen.add(name)
        if text in _WIDTHS:
            body = _WIDTHS[text]
        elif text in ("MMM", "MMMM", "EEE", "EEEE", "a"):
            body = r"[A-Za-z]+"
        elif text[0] == "S":
            body = rf"\d{{{len(text)}}}"
        elif len(text) == 2:
            body = r"\d{2}"
        elif len(text) == 3:
            body = r"\d{3}"
        else:
            body = r"\d{1,2}" if text != "D" else r"\d{1,3}"
        parts.append(f"(?P<{name}>{body})")
    return re.compile("".join(parts))


def parse_datetime(text: str, regex: re.Pattern[str]) -> dt.datetime | None:
    """The datetime ``text`` spells in the pattern, or None when it does not."""
    match = regex.fullmatch(text)
    if match is None:
        return None
    g = match.groupdict()
    try:
        year = int(g["y4"]) if g.get("y4") else (2000 + int(g["y2"]) if g.get("y2") else 1970)
        month = int(g.get("MM") or g.get("mo") or 0) or None
        for key, names in (("mon", calendar.month_abbr), ("month", calendar.month_name)):
            if g.get(key):
                lowered = [n.lower() for n in names]
                month = lowered.index(g[key].lower())
        day = int(g.get("d") or 1)
        hour = int(g.get("H") or 0)
        if g.get("h12"):
            hour = int(g["h12"]) % 12 + (12 if (g.get("ampm") or "").upper() == "PM" else 0)
        micro = int((g.get("frac") or "0").ljust(6, "0")[:6])
        if g.get("D"):
            base = dt.date(year, 1, 1) + dt.timedelta(days=int(g["D"]) - 1)
            if base.year != year:
                return None
            month, day = base.month, base.day
        return dt.datetime(
            year,
            month or 1,
            day,
            hour,
            int(g.get("m") or g.get("mi") or 0),
            int(g.get("s") or 0),
            micro,
        )
    except ValueError:
        return None

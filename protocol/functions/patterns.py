"""Regular-expression functions: ``regexp_replace``, ``regexp_extract``,
``regexp_extract_all``, ``split``; ``RLIKE`` is an operator of the evaluator.

Invariants (Spark's, whose patterns are Java regular expressions):
- Patterns are literals, compiled once; Python's ``re`` reads the Java
  syntax people use (classes, groups, quantifiers, anchors, look-arounds); a
  pattern it cannot compile is an :class:`InvalidExpressionError`.
- ``regexp_replace`` replacements use Java's ``$n`` group references and
  ``\\`` escapes; ``regexp_extract`` is ``''`` when nothing (or an unmatched
  group) matches; ``split`` follows Java's ``String.split`` with a negative
  limit (trailing empty strings kept, no leading empty string from a
  zero-width match) and ``limit > 0`` bounds the number of parts.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expression_types import Value
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import constant, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("patterns")


def _compile(ev: Evaluator, node: exp.Expr, what: str) -> re.Pattern[str] | None:
    pattern = constant(ev, node, what)
    if pattern is None:
        return None
    try:
        return re.compile(str(pattern))
    except re.error as error:
        raise InvalidExpressionError(
            f"{what} {pattern!r} is not a valid regular expression: {error} in {ev.sql!r}",
            ev.sql,
        ) from error


def _java_replacement(replacement: str) -> str:
    """A Java ``Matcher.replaceAll`` replacement as a Python ``re`` template."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        if char == "$":
            digits = re.match(r"\d+", replacement[i + 1 :])
            if digits is None:
                raise ValueError("a '$' in a replacement must name a group")
            out.append(f"\\g<{digits.group()}>")
            i += 1 + len(digits.group())
            continue
        out.append("\\\\" if char == "\\" else char)
        i += 1
    return "".join(out)


@REGISTRY.function("regexp_replace", nodes=(exp.RegexpReplace,))
def regexp_replace(ev: Evaluator, node: exp.RegexpReplace) -> Value:
    """``regexp_replace(s, regex, rep)``: every match replaced (``$1`` groups)."""
    if node.args.get("position") not in (None,) or node.args.get("occurrence") is not None:
        raise ev.refuse("regexp_replace with a position")
    pattern = _compile(ev, node.expression, "the pattern of regexp_replace")
    replacement = constant(ev, node.args.get("replacement"), "the replacement of regexp_replace")
    subject = ev.string(node.this)
    if pattern is None or replacement is None:
        return pa.scalar(None, pa.string())
    try:
        template = _java_replacement(str(replacement))
    except ValueError as error:
        raise ev.fail(str(error)) from error
    return rowwise(lambda text: pattern.sub(template, text), [subject], pa.string())


def _group_index(ev: Evaluator, pattern: re.Pattern[str], node: exp.Expr | None) -> int:
    index = 1 if node is None else constant(ev, node, "the group index")
    if index is None or not 0 <= int(index) <= pattern.groups:
        raise ev.fail(
            f"regex group index {index} is out of range (the pattern has {pattern.groups})"
        )
    return int(index)


@REGISTRY.function("regexp_extract", nodes=(exp.RegexpExtract,))
def regexp_extract(ev: Evaluator, node: exp.RegexpExtract) -> Value:
    """``regexp_extract(s, regex[, idx])``: group ``idx`` (1 by default) of the
    first match, or ``''``."""
    pattern = _compile(ev, node.expression, "the pattern of regexp_extract")
    subject = ev.string(node.this)
    if pattern is None:
        return pa.scalar(None, pa.string())
    index = _group_index(ev, pattern, node.args.get("group"))

    def extract(text: str) -> str:
        match = pattern.search(text)
        return "" if match is None else (match.group(index) or "")

    return rowwise(extract, [subject], pa.string())


@REGISTRY.function("regexp_extract_all", nodes=(exp.RegexpExtractAll,))
def regexp_extract_all(ev: Evaluator, node: exp.RegexpExtractAll) -> Value:
    """``regexp_extract_all(s, regex[, idx])``: group ``idx`` of every match."""
    pattern = _compile(ev, node.expression, "the pattern of regexp_extract_all")
    subject = ev.string(node.this)
    if pattern is None:
        return pa.scalar(None, pa.list_(pa.string()))
    index = _group_index(ev, pattern, node.args.get("group"))

    def extract(text: str) -> list[str]:
        return [m.group(index) or "" for m in pattern.finditer(text)]

    return rowwise(extract, [subject], pa.list_(pa.string()))


def java_split(text: str, pattern: re.Pattern[str], limit: int) -> list[str]:
    """Java's ``String.split(regex, limit)`` for ``limit != 0``."""
    if text == "":
        return [""]
    if pattern.pattern == "":
        # Spark splits on an empty pattern into characters, with no trailing "".
        chars = list(text)
        return (
            chars if limit <= 0 or len(chars) <= limit else [*chars[: limit - 1], text[limit - 1 :]]
        )
    parts: list[str] = []
    index = 0
    for match in pattern.finditer(text):
        if limit > 0 and len(parts) >= limit - 1:
            break
        if match.end() == 0:
            continue
        parts.append(text[index : match.start()])
        index = match.end()
    parts.append(text[index:])
    return parts


@REGISTRY.function("split", nodes=(exp.RegexpSplit,))
def split(ev: Evaluator, node: exp.RegexpSplit) -> Value:
    """``split(s, regex[, limit])``: the parts between matches (array<string>)."""
    pattern = _compile(ev, node.expression, "the pattern of split")
    limit_node = node.args.get("limit")
    limit = -1 if limit_node is None else constant(ev, limit_node, "the limit of split")
    subject = ev.string(node.this)
    if pattern is None or limit is None:
        return pa.scalar(None, pa.list_(pa.string()))
    bound = -1 if int(limit) <= 0 else int(limit)
    return rowwise(lambda t: java_split(t, pattern, bound), [subject], pa.list_(pa.string()))


@REGISTRY.function("regexp_count", nodes=(exp.RegexpCount,))
def regexp_count(ev: Evaluator, node: exp.RegexpCount) -> Value:
    """``regexp_count(s, regex)``: the number of matches (int)."""
    pattern = _compile(ev, node.expression, "the pattern of regexp_count")
    if pattern is None:
        return pa.scalar(None, pa.int32())
    return rowwise(lambda t: len(pattern.findall(t)), [ev.string(node.this)], pa.int32())

"""String functions: ``lower``, ``upper``, ``length``, ``trim`` and friends,
``substring``, ``concat``, ``concat_ws``, ``replace``, ``translate``,
``lpad``/``rpad``, ``instr``/``locate``, ``left``/``right``, ``reverse``,
``repeat``, ``initcap``, ``ascii``, ``chr``, ``octet_length``,
``startswith``/``endswith``/``contains``, ``substring_index``; regular
expressions live in :mod:`raydelta.protocol.functions.patterns`.

Invariants (Spark's):
- Positions and lengths count characters (code points), 1-based.
- NULL in, NULL out, except ``concat_ws`` (skips NULL parts; NULL only for a
  NULL separator) and ``locate`` (NULL start is 0).
- Non-string arguments are cast to strings as ``CAST(x AS STRING)`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.expression_types import Value
from raydelta.protocol.functions.formatting import java_format
from raydelta.protocol.functions.registry import Registry
from raydelta.protocol.functions.values import arguments, as_type, constant, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("strings")


@REGISTRY.function("lower", "lcase", nodes=(exp.Lower,))
def lower(ev: Evaluator, node: exp.Lower) -> Value:
    """Lower case."""
    return pc.utf8_lower(ev.string(node.this))


@REGISTRY.function("upper", "ucase", nodes=(exp.Upper,))
def upper(ev: Evaluator, node: exp.Upper) -> Value:
    """Upper case."""
    return pc.utf8_upper(ev.string(node.this))


@REGISTRY.function("length", "char_length", "character_length", "len", nodes=(exp.Length,))
def length(ev: Evaluator, node: exp.Length) -> Value:
    """The number of characters (int)."""
    return pc.utf8_length(ev.string(node.this)).cast(pa.int32())


@REGISTRY.function("octet_length", anonymous=("octet_length",), arity=(1, 1))
def octet_length(ev: Evaluator, node: exp.Anonymous) -> Value:
    """The number of UTF-8 bytes (int)."""
    return pc.binary_length(ev.string(arguments(node)[0])).cast(pa.int32())


@REGISTRY.function("trim", "ltrim", "rtrim", nodes=(exp.Trim,))
def trim(ev: Evaluator, node: exp.Trim) -> Value:
    """Strip spaces (or the given characters) from both ends, the start or the end."""
    subject = ev.string(node.this)
    characters = " "
    if node.expression is not None:
        characters = ev.literal_text(node.expression, "the characters to trim")
    position = str(node.args.get("position") or "BOTH").upper()
    kernel = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(position, pc.utf8_trim)
    if characters == "":
        return subject
    return kernel(subject, characters=characters)


@REGISTRY.function("btrim", anonymous=("btrim",), arity=(1, 2))
def btrim(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``btrim(s[, chars])``: strip the characters from both ends."""
    args = arguments(node)
    characters = " " if len(args) == 1 else constant(ev, args[1], "the characters to trim")
    subject = ev.string(args[0])
    if characters is None:
        return pa.scalar(None, pa.string())
    return subject if characters == "" else pc.utf8_trim(subject, characters=characters)


@REGISTRY.function("substring", "substr", nodes=(exp.Substring,))
def substring(ev: Evaluator, node: exp.Substring) -> Value:
    """``substring(s, pos[, len])``: characters from ``pos`` (1-based; negative
    counts from the end)."""
    subject = ev.string(node.this)
    start = ev.literal_int(node.args["start"], "a substring position")
    length_node = node.args.get("length")
    size = None if length_node is None else ev.literal_int(length_node, "a length")
    begin = start - 1 if start > 0 else start
    if size is not None and size <= 0:
        return pc.utf8_slice_codeunits(subject, start=0, stop=0)
    stop = None if size is None else begin + size
    if stop is not None and begin < 0 <= stop:
        stop = None
    return pc.utf8_slice_codeunits(subject, start=begin, stop=stop)


@REGISTRY.function("concat", nodes=(exp.Concat,))
def concat(ev: Evaluator, node: exp.Concat) -> Value:
    """The arguments joined; NULL if any is NULL."""
    parts = [ev.array(ev.string(e)) for e in node.expressions]
    if not parts:
        return pa.scalar("", pa.string())
    return pc.binary_join_element_wise(*parts, "", null_handling="emit_null")


@REGISTRY.function("concat_ws", nodes=(exp.ConcatWs,))
def concat_ws(ev: Evaluator, node: exp.ConcatWs) -> Value:
    """``concat_ws(sep, ...)``: the non-NULL arguments joined by ``sep``."""
    separator, *rest = node.expressions
    values = [ev.string(separator), *(ev.string(e) for e in rest)]

    def joined(sep: str | None, *parts: str | None) -> str | None:
        return None if sep is None else sep.join(p for p in parts if p is not None)

    return rowwise(joined, values, pa.string(), strict=False)


def _text_args(ev: Evaluator, nodes: list[exp.Expr]) -> list[Value]:
    return [ev.string(n) for n in nodes]


@REGISTRY.function("replace", nodes=(exp.Replace,))
def replace(ev: Evaluator, node: exp.Replace) -> Value:
    """``replace(s, search[, with])``: every ``search`` replaced (removed)."""
    subject = ev.string(node.this)
    search = constant(ev, node.expression, "the string to replace")
    replacement_node = node.args.get("replacement")
    replacement = (
        "" if replacement_node is None else constant(ev, replacement_node, "the new string")
    )
    if search is None or replacement is None:
        return pa.scalar(None, pa.string())
    if search == "":
        return subject
    return pc.replace_substring(subject, pattern=str(search), replacement=str(replacement))


@REGISTRY.function("translate", nodes=(exp.Translate,))
def translate(ev: Evaluator, node: exp.Translate) -> Value:
    """``translate(s, from, to)``: each character of ``from`` becomes the one at
    its place in ``to``, or is removed when ``to`` is shorter."""

    def one(text: str, source: str, target: str) -> str:
        mapping: dict[str, str] = {}
        for i, char in enumerate(source):
            mapping.setdefault(char, target[i] if i < len(target) else "")
        return "".join(mapping.get(c, c) for c in text)

    values = _text_args(ev, [node.this, node.args["from_"], node.args["to"]])
    return rowwise(one, values, pa.string())


def _pad(text: str, size: int, fill: str, left: bool) -> str:
    if size <= 0:
        return ""
    if len(text) >= size or fill == "":
        return text[:size]
    missing = size - len(text)
    padding = (fill * (missing // len(fill) + 1))[:missing]
    return padding + text if left else text + padding


@REGISTRY.function("lpad", "rpad", nodes=(exp.Pad,))
def pad(ev: Evaluator, node: exp.Pad) -> Value:
    """``lpad(s, n[, fill])``/``rpad``: ``s`` padded (or cut) to ``n`` characters."""
    fill_node = node.args.get("fill_pattern")
    fill = ev.string(fill_node) if fill_node is not None else pa.scalar(" ", pa.string())
    size = as_type(ev, node.expression, pa.int32())
    left = bool(node.args.get("is_left"))
    return rowwise(
        lambda t, n, f: _pad(t, n, f, left), [ev.string(node.this), size, fill], pa.string()
    )


def _index_of(text: str, search: str, start: int) -> int:
    """1-based position of ``search`` in ``text`` from ``start`` (0-based), or 0."""
    if search == "":
        return 1
    found = text.find(search, start)
    return found + 1


@REGISTRY.function("instr", "locate", "position", nodes=(exp.StrPosition,))
def str_position(ev: Evaluator, node: exp.StrPosition) -> Value:
    """``instr(s, sub)``, ``locate(sub, s[, pos])``: the 1-based position of
    ``sub`` (0 when absent); ``locate`` with ``pos < 1`` or a NULL ``pos`` is 0."""
    values = [ev.string(node.this), ev.string(node.args["substr"])]
    position = node.args.get("position")
    if position is None:
        return rowwise(lambda t, s: _index_of(t, s, 0), values, pa.int32())
    start = as_type(ev, position, pa.int32())

    def located(text: str | None, search: str | None, pos: int | None) -> int | None:
        if pos is None:
            return 0
        if text is None or search is None:
            return None
        if pos < 1:
            return 0
        if search == "":
            return 1  # Spark's indexOf of an empty string is 0, whatever the start
        return text.find(search, pos - 1) + 1

    return rowwise(located, [*values, start], pa.int32(), strict=False)


@REGISTRY.function("left", nodes=(exp.Left,))
def left(ev: Evaluator, node: exp.Left) -> Value:
    """``left(s, n)``: the first ``n`` characters."""
    size = as_type(ev, node.expression, pa.int32())
    return rowwise(lambda t, n: t[: max(n, 0)], [ev.string(node.this), size], pa.string())


@REGISTRY.function("right", nodes=(exp.Right,))
def right(ev: Evaluator, node: exp.Right) -> Value:
    """``right(s, n)``: the last ``n`` characters."""
    size = as_type(ev, node.expression, pa.int32())
    return rowwise(lambda t, n: t[-n:] if n > 0 else "", [ev.string(node.this), size], pa.string())


@REGISTRY.function("reverse", nodes=(exp.Reverse,))
def reverse(ev: Evaluator, node: exp.Reverse) -> Value:
    """The characters in reverse order (arrays: the elements)."""
    value = ev.value(node.this)
    if pa.types.is_list(value.type):
        return rowwise(lambda items: list(reversed(items)), [value], value.type)
    return pc.utf8_reverse(ev.string(node.this))


@REGISTRY.function("repeat", nodes=(exp.Repeat,))
def repeat(ev: Evaluator, node: exp.Repeat) -> Value:
    """``repeat(s, n)``: ``s`` repeated ``n`` times (empty for ``n <= 0``)."""
    times = as_type(ev, node.args["times"], pa.int32())
    return rowwise(lambda t, n: t * max(n, 0), [ev.string(node.this), times], pa.string())


def _initcap(text: str) -> str:
    out: list[str] = []
    previous = " "
    for char in text.lower():
        out.append(char.upper() if previous == " " and len(char.upper()) == 1 else char)
        previous = char
    return "".join(out)


@REGISTRY.function("initcap", nodes=(exp.Initcap,))
def initcap(ev: Evaluator, node: exp.Initcap) -> Value:
    """Lower case, then each word's first letter upper case (words split at spaces)."""
    delimiters = node.expression
    if delimiters is not None and not (
        isinstance(delimiters, exp.Literal) and delimiters.name == " "
    ):
        raise ev.refuse("initcap with delimiters")
    return rowwise(_initcap, [ev.string(node.this)], pa.string())


@REGISTRY.function("ascii", nodes=(exp.Ascii,))
def ascii_(ev: Evaluator, node: exp.Ascii) -> Value:
    """The code point of the first character (0 for an empty string)."""
    return rowwise(lambda t: ord(t[0]) if t else 0, [ev.string(node.this)], pa.int32())


def _chr(code: int) -> str:
    if code < 0:
        return ""
    return chr(code % 256)


@REGISTRY.function("chr", "char", nodes=(exp.Chr,))
def chr_(ev: Evaluator, node: exp.Chr) -> Value:
    """The character of code ``n % 256`` (empty for negative ``n``)."""
    if len(node.expressions) != 1:
        raise ev.refuse("chr with a character set")
    return rowwise(_chr, [as_type(ev, node.expressions[0], pa.int64())], pa.string())


_TESTS: dict[type[exp.Expr], str] = {exp.StartsWith: "starts_with", exp.EndsWith: "ends_with"}


@REGISTRY.function("startswith", "endswith", "contains", nodes=(*_TESTS, exp.Contains))
def string_test(ev: Evaluator, node: exp.Expr) -> Value:
    """Whether ``s`` starts with, ends with or contains ``t``."""
    subject, search = ev.string(node.this), ev.string(node.expression)
    if isinstance(search, pa.Scalar):
        if not search.is_valid:
            return pa.scalar(None, pa.bool_())
        if isinstance(node, exp.Contains):
            return pc.match_substring(subject, pattern=search.as_py())
        return getattr(pc, _TESTS[type(node)])(subject, pattern=search.as_py())
    checks: dict[type[exp.Expr], Any] = {
        exp.StartsWith: str.startswith,
        exp.EndsWith: str.endswith,
        exp.Contains: str.__contains__,
    }
    return rowwise(checks[type(node)], [subject, search], pa.bool_())


def _substring_index(text: str, delimiter: str, count: int) -> str:
    if count == 0 or delimiter == "":
        return ""
    parts = text.split(delimiter)
    if count > 0:
        return delimiter.join(parts[:count])
    return delimiter.join(parts[count:])


@REGISTRY.function("substring_index", nodes=(exp.SubstringIndex,))
def substring_index(ev: Evaluator, node: exp.SubstringIndex) -> Value:
    """``substring_index(s, delim, n)``: before the ``n``-th delimiter (from the
    end for negative ``n``)."""
    values = [
        ev.string(node.this),
        ev.string(node.args["delimiter"]),
        as_type(ev, node.args["count"], pa.int32()),
    ]
    return rowwise(_substring_index, values, pa.string())


@REGISTRY.function("format_string", "printf", nodes=(exp.Format,), anonymous=("printf",))
def format_string(ev: Evaluator, node: exp.Expr) -> Value:
    """``format_string(fmt, ...)``: Java's ``String.format`` (see
    :func:`raydelta.protocol.functions.formatting.java_format`)."""
    if isinstance(node, exp.Anonymous):
        pattern_node, *rest = arguments(node)
    else:
        pattern_node, rest = node.this, list(node.expressions)
    pattern = ev.string(pattern_node)
    values = [ev.value(n) for n in rest]
    bits = [v.type.bit_width if pa.types.is_integer(v.type) else None for v in values]

    def one(fmt: str | None, *args: Any) -> str | None:
        return None if fmt is None else java_format(fmt, list(args), bits, ev.sql)

    return rowwise(one, [pattern, *values], pa.string(), strict=False)

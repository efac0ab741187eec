"""Partition predicates: what a transaction read, as a small typed language.

A transaction that read part of a table records *how* it selected files as
predicates over the table's partition columns. At commit time the conflict
checker asks, for every file a concurrent winner added or removed, "could
this transaction have read that file?" (:func:`matches`).

The language: :class:`Comparison` (``=``, ``!=``, ``<``, ``<=``, ``>``,
``>=``), :class:`In`, :class:`IsNull`, :class:`And`, :class:`Or`,
:class:`Not`, :class:`AlwaysTrue`. Nodes are frozen pydantic models with a
``kind`` discriminator, so they pickle, cross Ray, and round-trip through
JSON. Build them with :func:`parse_predicate` (a small SQL subset), the
:func:`col` builder, ``&``/``|``/``~``, or :func:`from_partition_values`.

Invariants:
- Comparisons are typed: a partition value string is parsed by its column
  type (``partition_values.parse_partition_value``) and so is a string
  literal (``date < '2024-02-01'`` compares dates, ``id > 9`` integers).
  A literal that cannot be read as the column's type makes the comparison
  unknown (NULL), never a silent string comparison.
- :func:`evaluate` is SQL three-valued logic: ``None`` is NULL/unknown. A
  null partition value makes a comparison NULL; ``IS NULL`` is never NULL.
- :func:`matches` is the *conservative* question the conflict checker asks:
  "is there any row of a file with these partition values for which the
  predicate may be true?". A column that is not a partition column (not in
  ``column_types`` nor in the partition values) cannot be judged from
  partition values, so a comparison on it may be true, false or NULL;
  ``matches`` answers True unless the partition columns alone make the whole
  predicate false or NULL. It never answers False for a file the
  transaction could have read (it may answer True for one it did not).
  Evaluation lives in :mod:`raydelta.protocol.predicate_evaluation`.
- ``parse_predicate(to_sql(p)) == p`` for every predicate whose ``And`` and
  ``Or`` nodes have at least two children (the printer parenthesises nested
  ``And``/``Or`` and the parser keeps parenthesised groups as nodes).
- Column names resolve exactly first, then case-insensitively (Spark's
  default resolution).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict

from raydelta.protocol.errors import InvalidPredicateError

ComparisonOp = Literal["=", "!=", "<", "<=", ">", ">="]
COMPARISON_OPS: tuple[ComparisonOp, ...] = ("=", "!=", "<", "<=", ">", ">=")

# A literal: JSON scalars only (no null: ``x = NULL`` is always NULL in SQL,
# use IsNull). Strict so that "1" never silently becomes 1.
Scalar = (
    Annotated[bool, Strict()]
    | Annotated[int, Strict()]
    | Annotated[float, Strict(), AllowInfNan(False)]
    | Annotated[str, Strict()]
)


class _Node(BaseModel):
    """Base of every predicate node: frozen, no extra fields."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    def __and__(self, other: Predicate) -> And:
        return And(children=(self, other))  # type: ignore[arg-type]

    def __or__(self, other: Predicate) -> Or:
        return Or(children=(self, other))  # type: ignore[arg-type]

    def __invert__(self) -> Not:
        return Not(child=self)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return to_sql(self)  # type: ignore[arg-type]


class Comparison(_Node):
    """``column <op> value``."""

    kind: Literal["comparison"] = "comparison"
    column: str = Field(min_length=1)
    op: ComparisonOp
    value: Scalar


class In(_Node):
    """``column IN (v1, v2, ...)``: ``column = v1 OR column = v2 ...``."""

    kind: Literal["in"] = "in"
    column: str = Field(min_length=1)
    values: tuple[Scalar, ...] = Field(min_length=1)


class IsNull(_Node):
    """``column IS NULL`` (``IS NOT NULL`` is ``Not(IsNull(...))``)."""

    kind: Literal["is_null"] = "is_null"
    column: str = Field(min_length=1)


class And(_Node):
    kind: Literal["and"] = "and"
    children: tuple[Predicate, ...] = Field(min_length=1)


class Or(_Node):
    kind: Literal["or"] = "or"
    children: tuple[Predicate, ...] = Field(min_length=1)


class Not(_Node):
    kind: Literal["not"] = "not"
    child: Predicate


class AlwaysTrue(_Node):
    """Selects every file: the predicate of a transaction that read everything."""

    kind: Literal["true"] = "true"


Predicate = Annotated[
    Comparison | In | IsNull | And | Or | Not | AlwaysTrue, Field(discriminator="kind")
]

for _model in (And, Or, Not):
    _model.model_rebuild()


# --- builders -----------------------------------------------------------------------


class Column:
    """``col("date") == "2024-01-01"``-style builder of comparisons."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, value: Any) -> Comparison:  # type: ignore[override]
        return Comparison(column=self.name, op="=", value=value)

    def __ne__(self, value: Any) -> Comparison:  # type: ignore[override]
        return Comparison(column=self.name, op="!=", value=value)

    def __lt__(self, value: Any) -> Comparison:
        return Comparison(column=self.name, op="<", value=value)

    def __le__(self, value: Any) -> Comparison:
        return Comparison(column=self.name, op="<=", value=value)

    def __gt__(self, value: Any) -> Comparison:
        return Comparison(column=self.name, op=">", value=value)

    def __ge__(self, value: Any) -> Comparison:
        return Comparison(column=self.name, op=">=", value=value)

    __hash__ = None  # type: ignore[assignment]

    def isin(self, *values: Any) -> In:
        return In(column=self.name, values=values)

    def is_null(self) -> IsNull:
        return IsNull(column=self.name)

    def is_not_null(self) -> Not:
        return Not(child=IsNull(column=self.name))


def col(name: str) -> Column:
    return Column(name)


def from_partition_values(values: Mapping[str, str | None]) -> Predicate:
    """The predicate selecting exactly one partition (``{"date": "2024-01-01"}``).

    A null (or empty, which the spec reads as null) value becomes ``IS NULL``.
    An empty mapping selects everything.
    """
    terms: list[Predicate] = [
        IsNull(column=name)
        if value is None or value == ""
        else Comparison(column=name, op="=", value=value)
        for name, value in values.items()
    ]
    if not terms:
        return AlwaysTrue()
    return terms[0] if len(terms) == 1 else And(children=tuple(terms))


def references(predicate: Predicate) -> set[str]:
    """The column names a predicate mentions."""
    if isinstance(predicate, (Comparison, In, IsNull)):
        return {predicate.column}
    if isinstance(predicate, (And, Or)):
        return set().union(*(references(c) for c in predicate.children))
    if isinstance(predicate, Not):
        return references(predicate.child)
    return set()


# --- SQL text ---------------------------------------------------------------------------

KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
    | (?P<quoted>`(?:[^`]|``)*`)
    | (?P<string>'(?:[^']|'')*')
    | (?P<number>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
    | (?P<op><=|>=|<>|!=|==|=|<|>)
    | (?P<punct>[(),])
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)


def quote_identifier(name: str) -> str:
    """``name`` as it must appear in predicate text (backquoted when needed)."""
    if _IDENTIFIER.match(name) and name.upper() not in KEYWORDS:
        return name
    return "`" + name.replace("`", "``") + "`"


def _format_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _wrap(child: Predicate) -> str:
    text = to_sql(child)
    return f"({text})" if isinstance(child, (And, Or)) and len(child.children) > 1 else text


def to_sql(predicate: Predicate) -> str:
    """The predicate as text :func:`parse_predicate` reads back."""
    if isinstance(predicate, AlwaysTrue):
        return "TRUE"
    if isinstance(predicate, Comparison):
        return (
            f"{quote_identifier(predicate.column)} {predicate.op} "
            f"{_format_literal(predicate.value)}"
        )
    if isinstance(predicate, In):
        values = ", ".join(_format_literal(v) for v in predicate.values)
        return f"{quote_identifier(predicate.column)} IN ({values})"
    if isinstance(predicate, IsNull):
        return f"{quote_identifier(predicate.column)} IS NULL"
    if isinstance(predicate, Not):
        child = predicate.child
        if isinstance(child, IsNull):
            return f"{quote_identifier(child.column)} IS NOT NULL"
        if isinstance(child, In):
            values = ", ".join(_format_literal(v) for v in child.values)
            return f"{quote_identifier(child.column)} NOT IN ({values})"
        return f"NOT {_wrap(child)}"
    if isinstance(predicate, (And, Or)):
        joiner = " AND " if isinstance(predicate, And) else " OR "
        return joiner.join(_wrap(c) for c in predicate.children)
    raise InvalidPredicateError(f"not a predicate: {predicate!r}")


class _Parser:
    """Recursive descent over: or := and (OR and)*; and := not (AND not)*;
    not := NOT not | primary; primary := '(' or ')' | TRUE | FALSE | condition."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise InvalidPredicateError(
                    f"unexpected character {text[pos]!r} at position {pos} in {text!r}"
                )
            kind = m.lastgroup or ""
            if kind != "ws":
                self.tokens.append((kind, m.group(), pos))
            pos = m.end()
        self.index = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def _error(self, expected: str) -> InvalidPredicateError:
        token = self._peek()
        found = "end of input" if token is None else f"{token[1]!r} at position {token[2]}"
        return InvalidPredicateError(f"expected {expected}, found {found} in {self.text!r}")

    def _keyword(self, word: str) -> bool:
        token = self._peek()
        if token is not None and token[0] == "word" and token[1].upper() == word:
            self.index += 1
            return True
        return False

    def _punct(self, char: str) -> bool:
        token = self._peek()
        if token is not None and token[0] == "punct" and token[1] == char:
            self.index += 1
            return True
        return False

    def parse(self) -> Predicate:
        if not self.tokens:
            raise InvalidPredicateError("an empty predicate")
        result = self._or()
        if self._peek() is not None:
            raise self._error("AND, OR or the end of the predicate")
        return result

    def _or(self) -> Predicate:
        terms = [self._and()]
        while self._keyword("OR"):
            terms.append(self._and())
        return terms[0] if len(terms) == 1 else Or(children=tuple(terms))

    def _and(self) -> Predicate:
        terms = [self._not()]
        while self._keyword("AND"):
            terms.append(self._not())
        return terms[0] if len(terms) == 1 else And(children=tuple(terms))

    def _not(self) -> Predicate:
        if self._keyword("NOT"):
            return Not(child=self._not())
        return self._primary()

    def _primary(self) -> Predicate:
        if self._punct("("):
            inner = self._or()
            if not self._punct(")"):
                raise self._error("')'")
            return inner
        if self._keyword("TRUE"):
            return AlwaysTrue()
        if self._keyword("FALSE"):
            return Not(child=AlwaysTrue())
        column = self._column()
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            if not self._keyword("NULL"):
                raise self._error("NULL")
            is_null = IsNull(column=column)
            return Not(child=is_null) if negated else is_null
        negated = self._keyword("NOT")
        if self._keyword("IN"):
            in_list = In(column=column, values=self._values())
            return Not(child=in_list) if negated else in_list
        if negated:
            raise self._error("IN after NOT")
        token = self._peek()
        if token is None or token[0] != "op":
            raise self._error("a comparison operator, IN or IS")
        self.index += 1
        op = {"==": "=", "<>": "!="}.get(token[1], token[1])
        if self._keyword("NULL"):
            raise InvalidPredicateError(
                f"comparing with NULL is always NULL; use IS NULL / IS NOT NULL in {self.text!r}"
            )
        return Comparison(column=column, op=op, value=self._value())  # type: ignore[arg-type]

    def _column(self) -> str:
        token = self._peek()
        if token is None:
            raise self._error("a column name")
        kind, text, _ = token
        if kind == "quoted":
            self.index += 1
            name = text[1:-1].replace("``", "`")
            if not name:
                raise InvalidPredicateError(f"an empty column name in {self.text!r}")
            return name
        if kind == "word" and text.upper() not in KEYWORDS:
            self.index += 1
            return text
        raise self._error("a column name")

    def _value(self) -> Any:
        token = self._peek()
        if token is None:
            raise self._error("a literal")
        kind, text, _ = token
        if kind == "string":
            self.index += 1
            return text[1:-1].replace("''", "'")
        if kind == "number":
            self.index += 1
            if re.fullmatch(r"[+-]?\d+", text):
                return int(text)
            number = float(text)
            if number in (float("inf"), float("-inf")):
                raise InvalidPredicateError(f"number {text} is out of range in {self.text!r}")
            return number
        if self._keyword("TRUE"):
            return True
        if self._keyword("FALSE"):
            return False
        raise self._error("a literal (a 'string', a number, TRUE or FALSE)")

    def _values(self) -> tuple[Any, ...]:
        if not self._punct("("):
            raise self._error("'(' after IN")
        values = [self._value()]
        while self._punct(","):
            values.append(self._value())
        if not self._punct(")"):
            raise self._error("',' or ')' in the IN list")
        return tuple(values)


def parse_predicate(text: str) -> Predicate:
    """Parse the SQL subset: comparisons, ``IN``/``NOT IN``, ``IS [NOT] NULL``,
    ``AND``, ``OR``, ``NOT``, parentheses, ``TRUE``/``FALSE``.

    Literals are ``'strings'`` (``''`` escapes a quote), numbers and
    ``TRUE``/``FALSE``; identifiers are bare or ```backquoted```. Keywords
    are case-insensitive. Raises :class:`InvalidPredicateError`.

    >>> to_sql(parse_predicate("date = '2024-01-01' and region in ('eu','us')"))
    "date = '2024-01-01' AND region IN ('eu', 'us')"
    """
    return _Parser(text).parse()

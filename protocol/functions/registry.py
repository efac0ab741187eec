"""The table of Spark SQL functions raydelta evaluates: one :class:`SparkFunction`
per function, registered by the family module that implements it.

A function is found either by the sqlglot node type Spark's dialect parses it
into (``round(x)`` is ``exp.Round``) or, for the functions sqlglot leaves as
``exp.Anonymous`` (``bround``, ``hash``...), by its lower-cased name.

Invariants:
- One implementation per node type and per anonymous name; registering a
  second one raises at import time (a silent override would change results).
- ``monotonic`` marks a function non-decreasing in one argument (the
  others held constant) for arguments of the named kinds; file pruning
  (:mod:`raydelta.protocol.expression_pruning`) bounds ``f(col)`` by
  ``f(min)``/``f(max)`` only for those functions, and only on those kinds.
- Every implementation takes the evaluator and the node and returns a value
  with one entry per row (an array) or one for all rows (a scalar); argument
  counts of anonymous functions are checked before it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlglot import exp

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

Implementation = Callable[["Evaluator", Any], Any]

NUMERIC = frozenset({"integer", "floating", "decimal"})
TEMPORAL = frozenset({"date", "timestamp"})


@dataclass(frozen=True)
class Monotonic:
    """A function is non-decreasing in its argument ``argument`` (a sqlglot
    arg key such as ``"this"``, or the position ``"0"`` in an anonymous
    function's list) when that argument's type is of one of ``kinds``
    (``integer floating decimal date timestamp string``), its other
    arguments are constants, and it maps NULL to NULL."""

    argument: str
    kinds: frozenset[str]


@dataclass(frozen=True)
class SparkFunction:
    """One Spark SQL function (or operator) and how raydelta computes it.

    ``names`` are its Spark spellings (the README lists them); ``nodes`` the
    sqlglot node types they parse into; ``anonymous`` the names sqlglot keeps
    as ``exp.Anonymous``; ``arity`` the (min, max) argument count of those
    (max None: any)."""

    names: tuple[str, ...]
    family: str
    implementation: Implementation
    nodes: tuple[type[exp.Expr], ...] = ()
    anonymous: tuple[str, ...] = ()
    arity: tuple[int, int | None] = (0, None)
    summary: str = ""
    monotonic: Monotonic | None = None


class Registry:
    """The functions of one family, registered with :meth:`function`."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.functions: list[SparkFunction] = []

    def function(
        self,
        *names: str,
        nodes: tuple[type[exp.Expr], ...] = (),
        anonymous: tuple[str, ...] = (),
        arity: tuple[int, int | None] = (0, None),
        summary: str = "",
        monotonic: Monotonic | None = None,
    ) -> Callable[[Implementation], Implementation]:
        def register(implementation: Implementation) -> Implementation:
            self.functions.append(
                SparkFunction(
                    names=names,
                    family=self.family,
                    implementation=implementation,
                    nodes=nodes,
                    anonymous=anonymous,
                    arity=arity,
                    summary=summary or (implementation.__doc__ or "").strip().split("\n")[0],
                    monotonic=monotonic,
                )
            )
            return implementation

        return register


@dataclass(frozen=True)
class FunctionTable:
    """All families' functions, indexed by node type and anonymous name."""

    functions: tuple[SparkFunction, ...]
    by_node: dict[type[exp.Expr], SparkFunction]
    by_name: dict[str, SparkFunction]

    @classmethod
    def of(cls, *registries: Registry) -> FunctionTable:
        by_node: dict[type[exp.Expr], SparkFunction] = {}
        by_name: dict[str, SparkFunction] = {}
        functions: list[SparkFunction] = []
        for registry in registries:
            for function in registry.functions:
                functions.append(function)
                for node in function.nodes:
                    if node in by_node:
                        raise ValueError(f"{node.__name__} registered twice")
                    by_node[node] = function
                for name in function.anonymous:
                    if name in by_name:
                        raise ValueError(f"{name} registered twice")
                    by_name[name] = function
        return cls(functions=tuple(functions), by_node=by_node, by_name=by_name)

    def find(self, node: exp.Expr) -> SparkFunction | None:
        if isinstance(node, exp.Anonymous):
            return self.by_name.get(str(node.name).lower())
        return self.by_node.get(type(node))

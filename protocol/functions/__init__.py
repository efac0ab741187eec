"""Spark SQL's built-in functions, one module per family, in one table.

:data:`FUNCTIONS` is the table the evaluator and the parser's check consult
(a node whose function is not in it is refused, naming the function); the
README's list of supported functions is generated from it
(``python -m raydelta.protocol.functions.listing``).
"""

from __future__ import annotations

from raydelta.protocol.functions import (
    collections,
    conditionals,
    dates,
    hashing,
    math,
    operators,
    patterns,
    strings,
)
from raydelta.protocol.functions.registry import FunctionTable, SparkFunction

FUNCTIONS = FunctionTable.of(
    operators.REGISTRY,
    conditionals.REGISTRY,
    math.REGISTRY,
    strings.REGISTRY,
    patterns.REGISTRY,
    hashing.REGISTRY,
    dates.REGISTRY,
    collections.REGISTRY,
)

__all__ = ["FUNCTIONS", "FunctionTable", "SparkFunction"]

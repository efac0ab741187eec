"""The README's list of supported Spark SQL functions, generated from
:data:`raydelta.protocol.functions.FUNCTIONS` and the evaluator's syntax.

Invariant: :func:`markdown` is a pure function of the registry, so the
README section it produces (between :data:`BEGIN` and :data:`END`) is in
sync exactly when the registry has not changed since it was written
(``tests/protocol/test_functions_listing.py`` checks it and rewrites it).
"""

from __future__ import annotations

from raydelta.protocol.expression_evaluation import SYNTAX
from raydelta.protocol.functions import FUNCTIONS

BEGIN = (
    "<!-- spark-sql-functions:begin"
    " (generated: python -m tests.protocol.test_functions_listing) -->"
)
END = "<!-- spark-sql-functions:end -->"

_FAMILIES = {
    "operators": "Operators",
    "conditionals": "Conditionals",
    "math": "Math",
    "strings": "Strings",
    "patterns": "Regular expressions",
    "hashing": "Hashing",
    "dates": "Dates and times",
    "collections": "Structs, arrays and maps",
}


def markdown() -> str:
    """The generated section, markers included."""
    lines = [BEGIN, "", "- Syntax: " + "; ".join(SYNTAX) + "."]
    for family, title in _FAMILIES.items():
        names: list[str] = []
        for function in FUNCTIONS.functions:
            if function.family == family:
                names.extend(n for n in function.names if n not in names)
        lines.append(f"- {title}: " + ", ".join(f"`{n}`" for n in names) + ".")
    lines += ["", END]
    return "\n".join(lines)

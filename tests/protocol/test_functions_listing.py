"""The README's list of Spark SQL functions is the registry's.

Run ``python -m tests.protocol.test_functions_listing`` to rewrite the
README's section after adding a function.
"""

from __future__ import annotations

from pathlib import Path

from raydelta.protocol.functions import FUNCTIONS
from raydelta.protocol.functions.listing import BEGIN, END, markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(text: str) -> str:
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    return text[start:stop]


def test_readme_lists_the_registry() -> None:
    assert _section(README.read_text()) == markdown(), (
        "README's function list is stale: run python -m tests.protocol.test_functions_listing"
    )


def test_every_registered_name_is_listed() -> None:
    listed = markdown()
    for function in FUNCTIONS.functions:
        for name in function.names:
            assert f"`{name}`" in listed


def rewrite(path: Path = README) -> None:
    text = path.read_text()
    path.write_text(text.replace(_section(text), markdown()))


if __name__ == "__main__":
    rewrite()

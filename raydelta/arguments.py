"""Checks of the public API's arguments: a wrong one raises
:class:`~raydelta.protocol.errors.InvalidArgumentError` saying what was
expected. Nothing here needs Ray (``raydelta.load_snapshot`` uses it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raydelta.protocol.errors import InvalidArgumentError


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        raise InvalidArgumentError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


def check_version(version: Any) -> None:
    """Refuse a version that is not None or a non-negative int."""
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version < 0
    ):
        raise InvalidArgumentError(f"version must be a non-negative int, got {version!r}")


__all__ = ["check_bool", "check_choice", "check_version"]

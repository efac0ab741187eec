"""Options of the ``raydelta`` Spark format, parsed once into typed values.

Spark hands a data source its options as strings whose keys are
case-insensitive (``versionAsOf`` and ``versionasof`` are the same option);
every lookup here ignores case. Names follow delta-spark's
(``mergeSchema``, ``replaceWhere``, ``txnAppId``...).

Invariants:
- Keys starting with :data:`INTERNAL_PREFIX` are set by :func:`raydelta.spark.register`'s
  writer front door, never by users; they carry the write plan the driver
  computed to the data source's Python workers.
- Options the format does not support are refused with
  :class:`~raydelta.protocol.errors.InvalidArgumentError` naming them, not ignored,
  when they change what is written (``maxRecordsPerFile`` ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raydelta.protocol.errors import InvalidArgumentError

INTERNAL_PREFIX = "__raydelta."
PLAN_OPTION = INTERNAL_PREFIX + "plan"
RAY_ADDRESS_OPTION = "rayAddress"
RAY_ADDRESS_ENV = "RAYDELTA_RAY_ADDRESS"
FAULT_FILE_OPTION = INTERNAL_PREFIX + "faultFile"
"""Test hook: arms :mod:`raydelta.actors.faults` in the Python worker that commits."""

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


def option(options: Mapping[str, Any], name: str) -> str | None:
    """The value of option ``name`` (any case), or None."""
    wanted = name.lower()
    for key, value in options.items():
        if str(key).lower() == wanted:
            return None if value is None else str(value)
    return None


def flag(options: Mapping[str, Any], name: str, *, default: bool = False) -> bool:
    value = option(options, name)
    if value is None:
        return default
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, got {value!r}")


def integer(options: Mapping[str, Any], name: str) -> int | None:
    value = option(options, name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {value!r}") from None


def byte_size(options: Mapping[str, Any], name: str) -> int | None:
    """A size such as ``1048576``, ``512k``, ``64m`` or ``1g`` (Spark's spelling)."""
    value = option(options, name)
    if value is None:
        return None
    text = value.strip().lower().removesuffix("b")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    try:
        size = int(digits) * scale
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be a byte size, got {value!r}") from None
    if size <= 0:
        raise InvalidArgumentError(f"option {name} must be positive, got {value!r}")
    return size


def table_properties(options: Mapping[str, Any]) -> dict[str, str]:
    """``delta.*`` options: table properties of a table the write creates
    (as delta-spark takes them on the first write)."""
    return {str(k): str(v) for k, v in options.items() if str(k).lower().startswith("delta.")}


def ray_address(options: Mapping[str, Any], bound: str | None) -> str | None:
    """The Ray cluster the commit connects to: the ``rayAddress`` option, the
    address :func:`raydelta.spark.register` bound, ``RAYDELTA_RAY_ADDRESS``."""
    return option(options, RAY_ADDRESS_OPTION) or bound or os.environ.get(RAY_ADDRESS_ENV) or None


def connect_ray(address: str | None) -> None:
    """Attach this (Spark Python worker) process to the Ray cluster once."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address,
            log_to_driver=False,
            configure_logging=False,
            namespace="raydelta-spark",
        )


@dataclass(frozen=True)
class ReadOptions:
    """What a batch read selects: a version, a timestamp, or the change feed."""

    version: int | None
    timestamp: str | None
    change_feed: bool
    starting_version: int | None
    ending_version: int | None
    starting_timestamp: str | None
    ending_timestamp: str | None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> ReadOptions:
        parsed = cls(
            version=integer(options, "versionAsOf"),
            timestamp=option(options, "timestampAsOf"),
            change_feed=flag(options, "readChangeFeed") or flag(options, "readChangeData"),
            starting_version=_version_bound(options, "startingVersion"),
            ending_version=_version_bound(options, "endingVersion"),
            starting_timestamp=option(options, "startingTimestamp"),
            ending_timestamp=option(options, "endingTimestamp"),
        )
        if parsed.version is not None and parsed.timestamp is not None:
            raise InvalidArgumentError("pass versionAsOf or timestampAsOf, not both")
        if parsed.version is not None and parsed.version < 0:
            raise InvalidArgumentError(f"versionAsOf must be >= 0, got {parsed.version}")
        return parsed


def _version_bound(options: Mapping[str, Any], name: str) -> int | None:
    value = option(options, name)
    if value is None or value.strip().lower() == "latest":
        return None
    number = integer(options, name)
    if number is not None and number < 0:
        raise InvalidArgumentError(f"option {name} must be >= 0, got {number}")
    return number

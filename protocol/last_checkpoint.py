"""The ``_delta_log/_last_checkpoint`` file and its JSON checksum.

Invariants:
- ``_last_checkpoint`` is a hint. :func:`parse_last_checkpoint` never raises
  on bad content: an empty file, invalid JSON, duplicate keys (spec rule 7),
  a missing or mistyped ``version``/``size``, or a checksum that is present
  and wrong all give ``None``, and the caller falls back to listing.
- Unknown fields are kept (``extra="allow"``) and written back.
- :func:`canonicalize_json` follows the spec's "JSON checksum" rules: leaves
  only (empty objects and arrays contribute nothing), names and string values
  URL-encoded with the spec's strict unreserved set and uppercase hex, paths
  joined by ``+``, byte-order sorted, top-level ``checksum`` ignored.
- Numbers are "their own canonical form": when verifying a file, the number
  text exactly as written is used (``1.0`` stays ``1.0``, ``1`` stays ``1``).
  For Python values, ``int`` is written with ``str`` and ``float`` with
  ``repr``, which is also how :mod:`json` writes them, so a file produced by
  :func:`serialize_last_checkpoint` verifies against its own text.
- ``parse_last_checkpoint(serialize_last_checkpoint(info))`` equals ``info``
  except that ``checksum`` holds the freshly computed value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CHECKSUM_KEY = "checksum"

_StrictNonNegInt = Annotated[int, Field(strict=True, ge=0)]


class LastCheckpointInfo(BaseModel):
    """Contents of ``_last_checkpoint`` (see the spec's "Last Checkpoint File Schema").

    ``checkpoint_schema`` and ``v2_checkpoint`` stay raw JSON dicts: the first
    is a schema string in JSON form, the second embeds actions
    (``path``, ``sizeInBytes``, ``modificationTime``, ``nonFileActions``,
    ``sidecarFiles``) that the checkpoint reader interprets.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    version: _StrictNonNegInt
    size: _StrictNonNegInt
    parts: Annotated[int, Field(strict=True, ge=1)] | None = None
    size_in_bytes: _StrictNonNegInt | None = Field(default=None, alias="sizeInBytes")
    num_of_add_files: _StrictNonNegInt | None = Field(default=None, alias="numOfAddFiles")
    checkpoint_schema: dict[str, Any] | None = Field(default=None, alias="checkpointSchema")
    tags: dict[str, str] | None = None
    checksum: str | None = None
    v2_checkpoint: dict[str, Any] | None = Field(default=None, alias="v2Checkpoint")

    @property
    def v2_checkpoint_path(self) -> str | None:
        """File name of the UUID-named V2 checkpoint this hint points to, if any."""
        if self.v2_checkpoint is None:
            return None
        path = self.v2_checkpoint.get("path")
        return path if isinstance(path, str) else None

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object (aliases; unset optional fields absent; extras kept)."""
        data = self.model_dump(by_alias=True)
        for name, field in type(self).model_fields.items():
            key = field.alias or name
            if data.get(key) is None and field.default is None:
                data.pop(key, None)
        return data


# --- canonical JSON and checksum ------------------------------------------------


class _NumberText(str):
    """A JSON number kept as the exact text it was written with."""

    __slots__ = ()


def _encode(text: str) -> str:
    # quote() never escapes A-Z a-z 0-9 - . _ ~ and, with safe="", escapes
    # every other UTF-8 octet as %XX with uppercase hex: the spec's rules.
    return quote(text, safe="")


def _canonical_scalar(value: object) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, _NumberText):
        return str(value)
    if isinstance(value, str):
        return f'"{_encode(value)}"'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _collect(value: object, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        for key, child in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {type(key).__name__}")
            segment = f'"{_encode(key)}"'
            _collect(child, f"{path}+{segment}" if path else segment, out)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for index, child in enumerate(value):
            _collect(child, f"{path}+{index}" if path else str(index), out)
    else:
        out.append((path, _canonical_scalar(value)))


def canonicalize_json(obj: object) -> str:
    """The spec's canonical string of a JSON value (top-level ``checksum`` ignored).

    >>> canonicalize_json({"b": {"y": None, "x": "https://delta.io"}, "a": 10})
    '"a"=10,"b"+"x"="https%3A%2F%2Fdelta.io","b"+"y"=null'
    """
    if isinstance(obj, Mapping):
        obj = {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    pairs: list[tuple[str, str]] = []
    _collect(obj, "", pairs)
    if len(pairs) == 1 and pairs[0][0] == "":
        return pairs[0][1]  # a bare scalar
    pairs.sort(key=lambda pair: pair[0].encode("utf-8"))
    return ",".join(f"{path}={value}" for path, value in pairs)


def json_checksum(obj: object) -> str:
    """Lowercase hex MD5 of :func:`canonicalize_json` (UTF-8)."""
    return hashlib.md5(canonicalize_json(obj).encode("utf-8"), usedforsecurity=False).hexdigest()


# --- parse / serialize ---------------------------------------------------------


class _InvalidJson(ValueError):
    pass


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _InvalidJson(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise _InvalidJson(f"{name} is not valid JSON")


def _number_to_python(value: Any) -> Any:
    if isinstance(value, _NumberText):
        text = str(value)
        if any(c in text for c in ".eE"):
            return float(text)
        return int(text)
    if isinstance(value, dict):
        return {k: _number_to_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_number_to_python(v) for v in value]
    return value


def parse_last_checkpoint(data: bytes) -> LastCheckpointInfo | None:
    """Parse ``_last_checkpoint``; ``None`` when it is unusable (see module doc)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.strip():
        return None
    try:
        raw = json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_int=_NumberText,
            parse_float=_NumberText,
            parse_constant=_reject_constant,
        )
    except ValueError:  # JSONDecodeError and _InvalidJson are both ValueErrors
        return None
    if not isinstance(raw, dict):
        return None
    stored = raw.get(CHECKSUM_KEY)
    if stored is not None:
        if not isinstance(stored, str):
            return None
        try:
            computed = json_checksum(raw)
        except ValueError:  # e.g. a lone surrogate that UTF-8 cannot encode
            return None
        if stored.lower() != computed:
            return None
    try:
        return LastCheckpointInfo.model_validate(_number_to_python(raw))
    except ValidationError:
        return None


def serialize_last_checkpoint(info: LastCheckpointInfo) -> bytes:
    """Compact JSON with a freshly computed ``checksum`` as the last field."""
    body = info.to_json_dict()
    body.pop(CHECKSUM_KEY, None)
    body[CHECKSUM_KEY] = json_checksum(body)
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")

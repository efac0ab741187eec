"""``commitInfo.operationParameters`` as delta-spark reads them.

delta-spark's history reads the map as ``Map[String, String]``: a list value
(raydelta wrote ``"partitionBy": ["part"]``) made ``DeltaTable.history()``
fail on the whole table with a Jackson MismatchedInputException
(tests/spark_delta/test_concurrent_writers.py reads raydelta's commits with
delta-spark's history).
"""

from __future__ import annotations

import json

from raydelta.protocol.events import CommitRequest, ReadSet


def _request(parameters: dict[str, object]) -> CommitRequest:
    return CommitRequest(
        txn_id="t",
        read_set=ReadSet(read_version=0),
        operation_parameters=parameters,
        commit_time_ms=1,
    )


def test_lists_and_objects_become_json_text() -> None:
    request = _request({"mode": "Append", "partitionBy": ["part"], "options": {"a": 1}})
    assert request.operation_parameters == {
        "mode": "Append",
        "partitionBy": '["part"]',
        "options": '{"a":1}',
    }
    assert json.loads(request.operation_parameters["partitionBy"]) == ["part"]


def test_scalars_are_kept() -> None:
    parameters = {"mode": "Overwrite", "retention": 7, "dryRun": False, "x": None, "f": 1.5}
    assert _request(parameters).operation_parameters == parameters


def test_round_trip_through_json_is_stable() -> None:
    request = _request({"partitionBy": ["a", "b"]})
    assert CommitRequest.model_validate_json(request.model_dump_json()) == request

"""Vended S3 credentials on moto's S3 and STS servers (issue 33).

What moto 5.2.5 lets us prove, and what it does not:

- Proven here: the catalog never hands out its own keys; every vend is an
  STS ``AssumeRole`` of the configured role, giving distinct temporary keys
  with a session token; the session policy it sends (read back from moto's
  own record of the call) is exactly the one confining the credential to
  the table's prefix, read-only for ``READ``, and the expiration it states
  is the lifetime asked for; without a role it refuses and says how to
  configure one. On a moto server enforcing IAM (``/moto-api/reset-auth``),
  the vended keys are real session credentials there (refused without
  their token) carrying the *role's* permissions, not the catalog's: a
  bucket the role may not read stays closed to them though the catalog's
  own user may read it.
- Not provable on moto: moto ignores session policies (an assumed role's
  keys get the role's policies only) and never expires credentials, so
  "A's keys cannot read B", "READ keys cannot write" and "expired keys
  stop working" rest on AWS applying the session policy and the
  expiration. The policy document itself is evaluated by moto's IAM
  evaluator in ``tests/protocol/test_credential_scope.py``.
- Overlap refusals on S3: a bucket's root, another spelling of a table's
  prefix (``s3a``, case of scheme and bucket, a trailing slash), and
  spellings an object store would read literally (``..``, percent-escapes,
  policy wildcards).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import raydelta
from raydelta.protocol.credential_scope import AccessLevel, s3_session_policy
from raydelta.protocol.locations import parse_location
from raydelta.protocol.privileges import Privilege
from tests.s3_server import REGION, start_s3_server
from tests.uc_api.conftest import (
    VENDING_ROLE,
    UCServerFixture,
    grant_usage,
    start_uc_server,
    stop_uc_server,
)

DATA = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
LIFETIME_S = 900


def _external(name: str, uri: str) -> dict[str, Any]:
    return {
        "catalog_name": "main",
        "schema_name": "default",
        "name": name,
        "table_type": "EXTERNAL",
        "data_source_format": "DELTA",
        "storage_location": uri,
    }


def _setup(server: UCServerFixture, tables: dict[str, str]) -> dict[str, dict[str, Any]]:
    admin = server.admin_token
    assert server.request("POST", "/catalogs", {"name": "main"}, token=admin)[0] == 200
    body = {"catalog_name": "main", "name": "default"}
    assert server.request("POST", "/schemas", body, token=admin)[0] == 200
    infos = {}
    for name, uri in tables.items():
        status, infos[name] = server.request("POST", "/tables", _external(name, uri), token=admin)
        assert status == 200, infos[name]
    return infos


def _vend(server: UCServerFixture, table: dict[str, Any], operation: str, token: str) -> Any:
    body = {"table_id": table["table_id"], "operation": operation}
    status, vended = server.request("POST", "/temporary-table-credentials", body, token=token)
    assert status == 200, vended
    return vended


def _assumed_roles(endpoint: str) -> dict[str, dict[str, Any]]:
    """moto's record of every AssumeRole call, by the access key it issued."""
    with urllib.request.urlopen(endpoint + "/moto-api/data.json", timeout=30) as response:
        data = json.loads(response.read())
    return {role["access_key_id"]: role for role in data["sts"]["AssumedRole"]}


def _deltalake_rows(uri: str, endpoint: str, aws: dict[str, str]) -> list[int]:
    from deltalake import DeltaTable

    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": aws["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": aws["secret_access_key"],
        "AWS_SESSION_TOKEN": aws["session_token"],
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }
    return sorted(
        DeltaTable(uri, storage_options=options).to_pyarrow_table().column("id").to_pylist()
    )


@pytest.mark.slow
def test_each_vend_is_a_scoped_sts_credential(
    ray_cluster: Any, s3_server: Any, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    uris = {"a": f"s3://{bucket}/warehouse/a", "b": f"s3://{bucket}/warehouse/b"}
    for uri in uris.values():
        raydelta.create_table(uri, DATA.schema, storage_options=s3_server.storage_options).append(
            DATA
        )
    server = start_uc_server(
        tmp_path / "warehouse",
        storage_options=s3_server.storage_options,
        credential_role_arn=VENDING_ROLE,
        credential_lifetime_s=LIFETIME_S,
    )
    try:
        tables = _setup(server, uris)
        reader = server.token_for("reader", [Privilege.READ], table="main.default.a")
        writer = server.catalog.create_principal("writer")
        server.catalog.grant("writer", "main.default.a", ["READ", "WRITE"])
        grant_usage(server.catalog, "writer", "main.default.a", token=server.admin_token)
        before_ms = int(time.time() * 1000)
        read = _vend(server, tables["a"], "READ", reader)
        write = _vend(server, tables["a"], "READ_WRITE", writer)
        again = _vend(server, tables["a"], "READ", reader)
        after_ms = int(time.time() * 1000)
        keys = [v["aws_temp_credentials"]["access_key_id"] for v in (read, write, again)]
        assert len(set(keys)) == 3 and s3_server.storage_options["key"] not in keys
        assert all(v["aws_temp_credentials"]["session_token"] for v in (read, write, again))
        secret = s3_server.storage_options["secret"]
        assert all(secret not in json.dumps(v) for v in (read, write, again))
        for vended in (read, write):  # the expiration STS states: now + the lifetime
            stated = vended["expiration_time"]
            assert before_ms + LIFETIME_S * 1000 - 2000 <= stated <= after_ms + LIFETIME_S * 1000
        # what the catalog asked STS for, as moto recorded it
        assumed = _assumed_roles(s3_server.endpoint)
        a = parse_location(uris["a"])
        for vended, access, who in (
            (read, AccessLevel.READ, "reader"),
            (write, AccessLevel.READ_WRITE, "writer"),
        ):
            call = assumed[vended["aws_temp_credentials"]["access_key_id"]]
            assert call["role_arn"] == VENDING_ROLE
            assert call["session_name"] == f"raydelta-{who}"
            assert json.loads(call["policy"]) == s3_session_policy(a, access)
        read_policy = json.loads(assumed[keys[0]]["policy"])
        actions = {x for s in read_policy["Statement"] for x in np_list(s["Action"])}
        assert not actions & {"s3:PutObject", "s3:DeleteObject"}
        assert all(f"{bucket}/warehouse/b" not in json.dumps(s) for s in read_policy["Statement"])
        # the client path works with them (moto checks no policy here: see the module doc)
        assert _deltalake_rows(uris["a"], s3_server.endpoint, read["aws_temp_credentials"]) == [
            1,
            2,
            3,
        ]
        # path credentials: scoped to the path asked for
        body = {"url": uris["a"] + "/_delta_log", "operation": "PATH_READ"}
        status, path = server.request("POST", "/temporary-path-credentials", body, token=reader)
        assert status == 200, path
        call = _assumed_roles(s3_server.endpoint)[path["aws_temp_credentials"]["access_key_id"]]
        assert json.loads(call["policy"]) == s3_session_policy(
            parse_location(uris["a"] + "/_delta_log"), AccessLevel.READ
        )
        # B's credentials need READ on B
        status, _ = server.request(
            "POST",
            "/temporary-table-credentials",
            {"table_id": tables["b"]["table_id"], "operation": "READ"},
            token=reader,
        )
        assert status == 403
    finally:
        stop_uc_server(server, tmp_path)


def np_list(value: Any) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


@pytest.mark.slow
def test_s3_overlaps_and_no_role(ray_cluster: Any, s3_server: Any, tmp_path: Path) -> None:
    bucket = s3_server.new_bucket()
    uri = f"s3://{bucket}/warehouse/a"
    raydelta.create_table(uri, DATA.schema, storage_options=s3_server.storage_options)
    server = start_uc_server(tmp_path / "warehouse", storage_options=s3_server.storage_options)
    try:
        tables = _setup(server, {"a": uri})
        admin = server.admin_token
        for spelled in (
            f"s3://{bucket}",  # the bucket's root
            f"s3://{bucket}/",
            f"s3://{bucket}/warehouse",  # a parent
            f"s3://{bucket}/warehouse/a/inner",  # a child
            f"s3a://{bucket}/warehouse/a/",  # s3a, trailing slash
            f"S3://{bucket.upper()}/warehouse/a",  # scheme and bucket case
            f"s3://{bucket}/warehouse/x/../a",  # read literally by S3
            f"s3://{bucket}/warehouse/%61",  # a percent-escape
            f"s3://{bucket}/warehouse/a*",  # a policy wildcard
        ):
            status, error = server.request("POST", "/tables", _external("x", spelled), token=admin)
            assert (status, error["error_code"]) == (400, "INVALID_ARGUMENT"), (spelled, error)
        # a table in another bucket, or beside it, is fine
        elsewhere = f"s3://{bucket}/warehouse/ab"
        raydelta.create_table(elsewhere, DATA.schema, storage_options=s3_server.storage_options)
        assert server.request("POST", "/tables", _external("ab", elsewhere), token=admin)[0] == 200
        # no role configured: refused, saying how to configure it; never the catalog's keys
        body = {"table_id": tables["a"]["table_id"], "operation": "READ"}
        status, error = server.request("POST", "/temporary-table-credentials", body, token=admin)
        assert (status, error["error_code"]) == (400, "FAILED_PRECONDITION")
        assert "credential_role_arn" in error["message"]
        assert s3_server.storage_options["key"] not in json.dumps(error)
    finally:
        stop_uc_server(server, tmp_path)


def _boto(endpoint: str, service: str, key: str, secret: str, token: str | None = None) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )


@pytest.mark.slow
def test_on_an_iam_enforcing_server_the_keys_are_the_roles(
    ray_cluster: Any, tmp_path: Path
) -> None:
    from botocore.exceptions import ClientError

    moto = start_s3_server()  # its own server: IAM enforcement is server-wide
    endpoint = moto.endpoint
    server = None
    try:
        setup_iam = _boto(endpoint, "iam", "setup", "setup")
        setup_iam.create_user(UserName="catalog")
        everything = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        setup_iam.put_user_policy(
            UserName="catalog", PolicyName="all", PolicyDocument=json.dumps(everything)
        )
        created = setup_iam.create_access_key(UserName="catalog")["AccessKey"]
        key, secret = created["AccessKeyId"], created["SecretAccessKey"]
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = setup_iam.create_role(
            RoleName="vending", AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]["Arn"]
        tables_bucket, outside_bucket = "tables-33", "outside-33"
        only_tables = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": [
                        f"arn:aws:s3:::{tables_bucket}",
                        f"arn:aws:s3:::{tables_bucket}/*",
                    ],
                }
            ],
        }
        setup_iam.put_role_policy(
            RoleName="vending", PolicyName="tables", PolicyDocument=json.dumps(only_tables)
        )
        s3 = _boto(endpoint, "s3", key, secret)
        for name in (tables_bucket, outside_bucket):
            s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_object(Bucket=outside_bucket, Key="secret.txt", Body=b"not for tables")
        options = {
            "endpoint_url": endpoint,
            "key": key,
            "secret": secret,
            "client_kwargs": {"region_name": REGION},
        }
        uri = f"s3://{tables_bucket}/warehouse/a"
        raydelta.create_table(uri, DATA.schema, storage_options=options).append(DATA)
        request = urllib.request.Request(  # from now on every request is authorised
            endpoint + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},  # a form body would be parsed away
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        with pytest.raises(ClientError):  # enforcement is on: unknown keys are refused
            _boto(endpoint, "s3", "setup", "setup").list_objects_v2(Bucket=tables_bucket)

        server = start_uc_server(
            tmp_path / "warehouse", storage_options=options, credential_role_arn=role
        )
        table = _setup(server, {"a": uri})["a"]
        reader = server.token_for("reader", [Privilege.READ], table="main.default.a")
        aws = _vend(server, table, "READ", reader)["aws_temp_credentials"]
        assert aws["access_key_id"] != key
        vended = _boto(
            endpoint, "s3", aws["access_key_id"], aws["secret_access_key"], aws["session_token"]
        )
        listed = vended.list_objects_v2(Bucket=tables_bucket, Prefix="warehouse/a/_delta_log/")
        assert next(o["Key"] for o in listed["Contents"]).endswith("00000000000000000000.json")
        assert _deltalake_rows(uri, endpoint, aws) == [1, 2, 3]
        without_token = _boto(endpoint, "s3", aws["access_key_id"], aws["secret_access_key"])
        with pytest.raises(ClientError):
            without_token.list_objects_v2(Bucket=tables_bucket, Prefix="warehouse/a/")
        # the role's permissions, not the catalog's: its own user reads the other bucket
        assert s3.get_object(Bucket=outside_bucket, Key="secret.txt")["Body"].read()
        with pytest.raises(ClientError) as denied:
            vended.get_object(Bucket=outside_bucket, Key="secret.txt")
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
    finally:
        if server is not None:
            stop_uc_server(server, tmp_path)
        moto.stop()

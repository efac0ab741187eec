"""protocol.locations: one comparison of storage locations (pure, hypothesis-tested)."""

from __future__ import annotations

import itertools
from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.locations import (
    StorageLocation,
    file_url,
    hadoop_location,
    object_store_spelling_problem,
    overlapping_pairs,
    parse_location,
    table_uri,
)

SEGMENT = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/%\\?#"),
    min_size=1,
    max_size=6,
).filter(lambda s: s not in (".", ".."))
PATHS = st.lists(SEGMENT, min_size=0, max_size=5)
BUCKETS = st.sampled_from(["bucket", "other-bucket", "b2"])
SCHEMES = st.sampled_from(["s3", "file"])


def uri_of(scheme: str, bucket: str, segments: list[str]) -> str:
    path = "/" + "/".join(segments)
    return f"file://{path}" if scheme == "file" else f"s3://{bucket}{path}"


def loc(uri: str, **kw: bool) -> StorageLocation:
    return parse_location(uri, **kw)


@pytest.mark.parametrize(
    ("a", "b", "relation"),
    [
        ("s3://bucket/t", "s3://bucket/t", "equals"),
        ("s3://bucket/t/", "s3://bucket/t", "equals"),  # trailing slash
        ("s3://bucket/t", "s3a://bucket/t//", "equals"),  # s3a, doubled slash
        ("S3://BUCKET/t", "s3://bucket/t", "equals"),  # scheme and bucket case
        ("s3://bucket/t/part", "s3://bucket/t", "lies inside"),  # child
        ("s3://bucket/t", "s3://bucket/t/part", "contains"),  # parent
        ("s3://bucket", "s3://bucket/any/table", "contains"),  # a bucket's root
        ("s3://bucket/", "s3://bucket/any", "contains"),
        ("s3://bucket/x/../t", "s3://bucket/t", "equals"),  # ..
        ("s3://bucket/./t/.", "s3://bucket/t", "equals"),  # .
        ("s3://bucket/%74", "s3://bucket/t", "equals"),  # percent-encoding
        ("s3://bucket/a%2Fb", "s3://bucket/a/b", "equals"),  # encoded slash
        ("s3://bucket/a%252Fb", "s3://bucket/a%2Fb", None),  # decoded once only
        ("/w/t", "file:///w/t", "equals"),
        ("file:/w/t", "file:///w/t/", "equals"),
        ("file://localhost/w/t", "file:///w/t", "equals"),
        ("file:///", "file:///etc", "contains"),  # the local root
        ("/", "/w/t", "contains"),
        ("/w/ext/../managed/t", "/w/managed", "lies inside"),
        ("/w/../../../w/t", "/w/t", "equals"),  # never above the root
        ("s3://bucket/t", "s3://bucket/tt", None),  # a shared prefix is no overlap
        ("s3://bucket/a/b", "s3://bucket/a/bc/d", None),
        ("s3://bucket/t", "s3://other/t", None),  # buckets
        ("s3://bucket/t", "gs://bucket/t", None),  # stores
        ("file:///t", "s3://t", None),
        ("memory://a/b", "memory:///a/b/c", "contains"),
        (
            "abfss://c@acct.dfs.core.windows.net/t",
            "abfs://c@acct.dfs.core.windows.net/t/x",
            "contains",
        ),
    ],
)
def test_relations(a: str, b: str, relation: str | None) -> None:
    assert loc(a).relation_to(loc(b)) == relation
    assert loc(a).overlaps(loc(b)) == (relation is not None)


def test_case_folds_only_where_the_store_is_case_insensitive() -> None:
    assert not loc("/W/Table").overlaps(loc("/w/table"))
    assert loc("/W/Table", case_insensitive=True) == loc("/w/TABLE", case_insensitive=True)
    assert loc("s3://b/T").key_prefix == "T"  # S3 keys are case-sensitive


@pytest.mark.parametrize("bad", ["", "relative/path", "C:/x", "s3://", "s3:///key"])
def test_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_location(bad)


def test_canonical_uri_and_key_prefix() -> None:
    assert loc("s3a://Bucket/a//b/").uri() == "s3://bucket/a/b"
    assert loc("s3://bucket").uri() == "s3://bucket"
    assert loc("/a/b").uri() == "file:///a/b"
    assert loc("file:///").uri() == "file:///"
    assert loc("s3://bucket/a/b/").key_prefix == "a/b"


@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("s3://b/a/b", True),
        ("s3://b/a/b/", True),
        ("s3://b", True),
        ("s3://b/", True),
        ("s3://b/a/../b", False),
        ("s3://b/a/./b", False),
        ("s3://b/a//b", False),
        ("s3://b/a%20b", False),
        ("s3://b/t*", False),
        ("s3://b/t?/x", False),
        ("s3://b/${aws:username}", False),
        ("/a/b", True),
    ],
)
def test_object_store_spelling(uri: str, canonical: bool) -> None:
    assert (object_store_spelling_problem(uri) is None) == canonical


@settings(max_examples=300, deadline=None)
@given(SCHEMES, BUCKETS, PATHS, PATHS)
def test_contains_is_segment_prefix(scheme: str, bucket: str, a: list[str], b: list[str]) -> None:
    outer, inner = loc(uri_of(scheme, bucket, a)), loc(uri_of(scheme, bucket, b))
    assert outer.contains(inner) == (b[: len(a)] == a)
    assert outer.overlaps(inner) == inner.overlaps(outer)  # symmetric
    assert outer.contains(outer)  # reflexive


@settings(max_examples=300, deadline=None)
@given(SCHEMES, BUCKETS, PATHS, st.data())
def test_spellings_of_one_place_are_one_location(
    scheme: str, bucket: str, segments: list[str], data: st.DataObject
) -> None:
    place = loc(uri_of(scheme, bucket, segments))
    # percent-encode any characters, add a trailing slash, insert x/.. and . segments
    spelled = []
    for segment in segments:
        if data.draw(st.booleans()):
            spelled.append(data.draw(SEGMENT))
            spelled.append("..")
        if data.draw(st.booleans()):
            spelled.append(".")
        if data.draw(st.booleans()):
            segment = quote(segment, safe="")
        spelled.append(segment)
    uri = uri_of(scheme, bucket, spelled) + ("/" if data.draw(st.booleans()) else "")
    assert loc(uri) == place


@settings(max_examples=200, deadline=None)
@given(PATHS, st.data())
def test_case_insensitive_stores_fold_case(segments: list[str], data: st.DataObject) -> None:
    # a case variant of each character: its upper case, where that folds back to the
    # same character (not so for U+0131, dotless i, whose upper case 'I' folds to 'i')
    cased = [
        "".join(
            c.upper() if c.upper().casefold() == c.casefold() and data.draw(st.booleans()) else c
            for c in segment
        )
        for segment in segments
    ]
    a = loc(uri_of("file", "", segments), case_insensitive=True)
    assert a == loc(uri_of("file", "", cased), case_insensitive=True)


def test_case_folding_is_unicode_folding_not_upper_casing() -> None:
    """Dotless i (U+0131) upper-cases to 'I' but is no case variant of it: Unicode
    case folding, which case-insensitive file systems use, keeps them apart."""
    dotless = "\u0131"
    assert loc(f"file:///t/{dotless}", case_insensitive=True) != loc(
        "file:///t/I", case_insensitive=True
    )
    assert loc("file:///t/I", case_insensitive=True) == loc("file:///t/i", case_insensitive=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(SCHEMES, BUCKETS, PATHS), min_size=0, max_size=8))
def test_overlapping_pairs_matches_every_pair(places: list[tuple[str, str, list[str]]]) -> None:
    named = {f"t{i}": loc(uri_of(*place)) for i, place in enumerate(places)}
    expected = sorted(
        (min(a, b), max(a, b))
        for a, b in itertools.combinations(named, 2)
        if named[a].overlaps(named[b])
    )
    assert overlapping_pairs(named) == expected


@settings(max_examples=200, deadline=None)
@given(BUCKETS, PATHS, PATHS, PATHS)
def test_contains_is_transitive(bucket: str, a: list[str], b: list[str], c: list[str]) -> None:
    x, y, z = (loc(uri_of("s3", bucket, p)) for p in (a, a + b, a + b + c))
    assert x.contains(y) and y.contains(z) and x.contains(z)


# --- the one spelling of a table location (table_uri and its views) -------------------

CWD, HOME = "/work/dir", "/home/me"


@pytest.mark.parametrize(
    ("given", "spelled"),
    [
        ("/data/t", "file:///data/t"),
        ("/data/t/", "file:///data/t"),
        ("/data//t/./x/..", "file:///data/t"),
        ("rel/t", "file:///work/dir/rel/t"),
        ("../t", "file:///work/t"),
        ("~/t", "file:///home/me/t"),
        ("file:///data/t/", "file:///data/t"),
        ("file:/data/t", "file:///data/t"),  # Hadoop's spelling (delta-spark, Unity Catalog)
        ("file://localhost/data/t", "file:///data/t"),
        ("/data/100%25/t", "file:///data/100%25/t"),  # local names are never percent-decoded
        ("s3://bucket/t/", "s3://bucket/t"),
        ("s3a://bucket/a/../t", "s3a://bucket/a/../t"),  # object-store keys are literal
        ("memory://t/", "memory://t"),
    ],
)
def test_a_table_has_one_spelling(given: str, spelled: str) -> None:
    assert table_uri(given, cwd=CWD, home=HOME) == spelled


_SEGMENT = st.text(alphabet="ab%._-", min_size=1, max_size=4)


@given(
    st.lists(_SEGMENT, min_size=1, max_size=5),
    st.sampled_from(["", "/", "file:", "file://", "file://localhost", "s3://b/", "memory://"]),
    st.booleans(),
)
def test_the_spelling_is_idempotent_and_its_views_agree(
    segments: list[str], prefix: str, trailing: bool
) -> None:
    path = "/".join(segments) + ("/" if trailing else "")
    if prefix.startswith("file://"):
        path = "/" + path
    uri = table_uri(prefix + path, cwd=CWD, home=HOME)
    assert table_uri(uri, cwd=CWD, home=HOME) == uri
    assert not uri.endswith("/") or uri.endswith(":///")
    assume(not uri.endswith(":///"))  # a store's root is no table's location
    if uri.startswith("file:"):
        assert uri.startswith("file:///")
        assert hadoop_location(uri) == "file:" + uri[len("file://") :]
        assert file_url(hadoop_location(uri)) == uri
        assert table_uri(hadoop_location(uri), cwd=CWD, home=HOME) == uri
    else:
        assert hadoop_location(uri) == uri == file_url(uri)

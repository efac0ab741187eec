"""delta-spark's JVM jars for the test session's Spark, from the local Maven cache.

The pip package ``delta-spark`` pins the Delta version; its jars are the
Maven artifacts ``io.delta:delta-spark_<spark major.minor>_2.13``,
``delta-storage`` and the three ``delta-kernel-*`` jars it depends on. Every
other class they need ships in PySpark's own ``jars/`` folder.

Why not ``configure_spark_with_delta_pip`` (``spark.jars.packages``) as a
user would: Spark's Ivy resolver cannot reach the registry from this
workplace's machines (it reports a proxy it cannot use), and Ivy's
transitive resolution also asks for jars (hadoop, parquet, log4j, ...) that
PySpark already carries. So the session puts Delta's own jars on
``spark.jars``, and a fresh machine fills the local Maven cache once with
``mvn dependency:get`` (which reaches Maven Central here); later runs use
the cache, as Spark's resolver would.

S3 (``s3a://``) for the same session: PySpark ships Hadoop's client jars
(``hadoop-client-api-<v>.jar``) but not the S3A connector. :func:`s3a_jars`
adds ``org.apache.hadoop:hadoop-aws`` at exactly PySpark's Hadoop version and
the AWS SDK v2 ``bundle`` (and the analytics-accelerator stream library)
at the versions that Hadoop release's ``hadoop-project`` POM names, fetched
the same way (each artifact alone, ``-Dtransitive=false``: the POMs'
transitive closure names repositories this machine cannot reach). Hadoop
3.5's S3A does the conditional ``PUT`` (``If-None-Match: *``) that makes
delta-spark's S3 commit a put-if-absent (``tests/spark_delta/test_s3.py``).
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from pathlib import Path

MAVEN_REPOSITORY = Path.home() / ".m2" / "repository"
SCALA = "2.13"


def delta_version() -> str:
    return importlib.metadata.version("delta-spark")


def spark_artifact() -> str:
    import pyspark

    major_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"delta-spark_{major_minor}_{SCALA}"


def _artifacts() -> list[str]:
    return [
        spark_artifact(),
        "delta-storage",
        "delta-kernel-api",
        "delta-kernel-defaults",
        "delta-kernel-unitycatalog",
    ]


def _jar(artifact: str, version: str) -> Path:
    return MAVEN_REPOSITORY / "io" / "delta" / artifact / version / f"{artifact}-{version}.jar"


def delta_jars() -> list[Path]:
    """The jar files, fetched into ``~/.m2`` first when any is missing.

    Raises ``RuntimeError`` with Maven's own message when the fetch fails, so a
    test run says exactly why delta-spark is unavailable.
    """
    version = delta_version()
    jars = [_jar(artifact, version) for artifact in _artifacts()]
    if all(jar.is_file() for jar in jars):
        return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("delta-spark's jars are not in ~/.m2 and mvn is not installed")
    coordinate = f"io.delta:{spark_artifact()}:{version}"
    done = subprocess.run(
        [mvn, "-q", "-B", "dependency:get", f"-Dartifact={coordinate}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    missing = [jar for jar in jars if not jar.is_file()]
    if done.returncode != 0 or missing:
        raise RuntimeError(
            f"mvn dependency:get {coordinate} failed (exit {done.returncode}); "
            f"missing {[str(jar) for jar in missing]}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return jars


def hadoop_version() -> str:
    """The Hadoop release PySpark's own jars are (``hadoop-client-api-<v>.jar``)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise RuntimeError(f"no hadoop-client-api jar in {jars}")


def _maven_path(group: str, artifact: str, version: str, kind: str = "jar") -> Path:
    return MAVEN_REPOSITORY.joinpath(
        *group.split("."), artifact, version, f"{artifact}-{version}.{kind}"
    )


def _mvn_get(coordinate: str) -> None:
    """``mvn dependency:get`` of one artifact alone; RuntimeError with Maven's
    own message when it fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"{coordinate} is not in ~/.m2 and mvn is not installed")
    done = subprocess.run(
        [mvn, "-q", "-B", "dependency:get", "-Dtransitive=false", f"-Dartifact={coordinate}"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"mvn dependency:get {coordinate} failed (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def _cached(group: str, artifact: str, version: str, kind: str = "jar") -> Path:
    path = _maven_path(group, artifact, version, kind)
    if not path.is_file():
        _mvn_get(f"{group}:{artifact}:{version}:{kind}")
        if not path.is_file():
            raise RuntimeError(f"mvn dependency:get reported success but {path} is missing")
    return path


def s3a_jars() -> list[Path]:
    """hadoop-aws at PySpark's Hadoop version and the AWS SDK v2 bundle it was
    built against, fetched into ``~/.m2`` once (the bundle is ~690 MB)."""
    hadoop = hadoop_version()
    pom = _cached("org.apache.hadoop", "hadoop-project", hadoop, "pom").read_text()

    def pinned(prop: str) -> str:
        found = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom)
        if found is None:
            raise RuntimeError(f"hadoop-project {hadoop} POM names no {prop}")
        return found.group(1)

    return [
        _cached("org.apache.hadoop", "hadoop-aws", hadoop),
        _cached("software.amazon.awssdk", "bundle", pinned("aws-java-sdk-v2.version")),
        _cached(
            "software.amazon.s3.analyticsaccelerator",
            "analyticsaccelerator-s3",
            pinned("amazon-s3-analyticsaccelerator-s3.version"),
        ),
    ]

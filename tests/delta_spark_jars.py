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
"""

from __future__ import annotations

import importlib.metadata
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

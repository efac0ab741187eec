"""``python -m benchmarks.run`` knows every benchmark, the README's results
table is the one generated from the result files, and a result taken on a
loaded machine is not recorded unless forced."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import common, report, run

BENCH_DIR = Path(run.__file__).resolve().parent


def test_every_benchmark_module_is_run_or_declared_a_helper() -> None:
    modules = {p.stem for p in BENCH_DIR.glob("*.py") if p.stem != "__init__"}
    registered = {b.name for b in run.BENCHMARKS}
    assert registered.isdisjoint(run.HELPERS)
    assert modules == registered | run.HELPERS


@pytest.mark.parametrize("bench", run.BENCHMARKS, ids=lambda b: b.name)
def test_every_option_the_runner_passes_is_one_the_benchmark_declares(
    bench: run.Benchmark,
) -> None:
    source = (BENCH_DIR / f"{bench.name}.py").read_text(encoding="utf-8")
    declared = set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", source))
    passed = {a for a in (*bench.full, *bench.quick, "--no-write") if a.startswith("--")}
    assert passed <= declared, f"{bench.name} does not declare {sorted(passed - declared)}"


def test_the_readme_table_is_the_generated_one() -> None:
    text = report.README.read_text(encoding="utf-8")
    start = text.index(report.BEGIN) + len(report.BEGIN)
    end = text.index(report.END)
    assert text[start:end].strip() == report.render().strip()


def test_the_table_has_one_row_per_result_file_with_its_figures(tmp_path: Path) -> None:
    body = {"unit": "s", "ours": 1.5, "peer": 3.0, "ratio": 0.5, "goal_met": True}
    body["load_guard"] = {"start_1min": 0.25, "forced": False}
    (tmp_path / "alpha.json").write_text(json.dumps(body))
    (tmp_path / "run.json").write_text(json.dumps({"runs": []}))
    rows = report.render(tmp_path).splitlines()[2:]
    assert rows == ["| `alpha` | s | 1.5 | 3 | 0.5 | true | 0.25 | n/a |"]


def _isolated_results(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(common, "REFUSED_DIR", tmp_path / "results" / "refused")


RESULT = {"unit": "s", "ours": 1.0, "peer": 2.0, "ratio": 0.5}


def test_a_result_taken_above_the_load_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolated_results(monkeypatch, tmp_path)
    monkeypatch.delenv(common.FORCE_ENV, raising=False)
    # any real load average is above a limit of -1
    monkeypatch.setattr(common, "LOAD_LIMIT", -1.0)
    path = common.write_result("loaded", dict(RESULT))
    assert path == tmp_path / "results" / "refused" / "loaded.json"
    assert not (tmp_path / "results" / "loaded.json").exists()
    guard = json.loads(path.read_text())["load_guard"]
    assert guard["accepted"] is False and guard["quiet"] is False and guard["forced"] is False


def test_a_forced_result_is_recorded_and_says_it_was_forced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolated_results(monkeypatch, tmp_path)
    monkeypatch.setenv(common.FORCE_ENV, "1")
    monkeypatch.setattr(common, "LOAD_LIMIT", -1.0)
    path = common.write_result("forced", dict(RESULT))
    assert path == tmp_path / "results" / "forced.json"
    guard = json.loads(path.read_text())["load_guard"]
    assert guard["accepted"] is True and guard["forced"] is True


def test_a_quiet_result_is_recorded_unforced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolated_results(monkeypatch, tmp_path)
    monkeypatch.delenv(common.FORCE_ENV, raising=False)
    # no real load average is above this limit
    monkeypatch.setattr(common, "LOAD_LIMIT", float("inf"))
    path = common.write_result("quiet", dict(RESULT))
    assert path == tmp_path / "results" / "quiet.json"
    guard = json.loads(path.read_text())["load_guard"]
    assert guard == {**guard, "accepted": True, "forced": False, "quiet": True}


def test_a_measurement_carries_the_machines_cpu_time() -> None:
    measured = common.measure_once("benchmarks.common:machine_info")
    assert measured.cpu_seconds >= 0.0
    assert measured.child_cpu_seconds > 0.0


def test_the_runner_lists_what_it_would_run_and_refuses_unknown_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run.main(["--list", "--only", "commit_latency", "vacuum"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == ["commit_latency", "vacuum"]
    with pytest.raises(SystemExit):
        run.main(["--list", "--only", "no_such_benchmark"])

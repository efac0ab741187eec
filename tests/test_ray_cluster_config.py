"""``ray_cluster.yaml`` is a cluster-launcher config Ray accepts (its own schema)."""

from __future__ import annotations

from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CONFIG = Path(__file__).resolve().parents[1] / "ray_cluster.yaml"


def test_ray_cluster_yaml_passes_rays_validation() -> None:
    config = prepare_config(yaml.safe_load(CONFIG.read_text()))
    validate_config(config)
    types = config["available_node_types"]
    assert types[config["head_node_type"]]["max_workers"] == 0
    assert sum(t["max_workers"] for t in types.values()) <= config["max_workers"]
    # the head only hosts the table actors (num_cpus=0): the work scales out on workers
    assert any("--num-cpus=0" in cmd for cmd in config["head_start_ray_commands"])
    # table hosts only on the head: autoscaled workers come and go without moving tables
    assert types[config["head_node_type"]]["resources"] == {"table_host": 1}
    for commands in (config["head_start_ray_commands"], config["worker_start_ray_commands"]):
        assert any("RAYDELTA_HOST_RESOURCE=table_host" in cmd for cmd in commands)


def test_the_local_autoscaling_tests_use_the_yamls_node_types() -> None:
    from tests.cluster.fake_cluster import FAKE_HEAD_TYPE, fake_config

    declared = yaml.safe_load(CONFIG.read_text())
    # complete as written: prepare_config would fill defaults from the fake provider's
    # example.yaml, which Ray's wheel does not ship
    fake = fake_config("127.0.0.1:6379")
    validate_config(fake)  # Ray's own schema accepts the fake provider's config too
    workers = {n for n in declared["available_node_types"] if n != declared["head_node_type"]}
    assert set(fake["available_node_types"]) == workers | {FAKE_HEAD_TYPE}
    # the head runs no tasks in either: checkpoint shards need workers, so they autoscale
    assert fake["available_node_types"][FAKE_HEAD_TYPE]["resources"]["CPU"] == 0
    for name in workers:
        assert fake["available_node_types"][name]["min_workers"] == (
            declared["available_node_types"][name].get("min_workers", 0)
        )
    # a short idle timeout locally; the real one releases idle workers too
    assert declared["idle_timeout_minutes"] > 0

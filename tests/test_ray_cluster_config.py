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

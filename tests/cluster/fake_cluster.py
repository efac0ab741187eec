"""Ray's fake multi-node provider configured with ``ray_cluster.yaml``'s node types.

Shared by ``tests/cluster/test_autoscaling.py`` (which starts a cluster with
it) and ``tests/test_ray_cluster_config.py`` (which checks it against the
real config): the local autoscaling tests exercise the node types users
deploy, sized for this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CLUSTER_YAML = Path(__file__).resolve().parents[2] / "ray_cluster.yaml"
FAKE_HEAD_TYPE = "ray.head.default"  # the fake provider's fixed name for the head
WORKER_CPUS = 1
MAX_WORKERS = 2
IDLE_TIMEOUT_MINUTES = 0.1


def fake_config(gcs_address: str) -> dict[str, Any]:
    """``ray_cluster.yaml``'s node types on Ray's fake multi-node provider."""
    declared = yaml.safe_load(CLUSTER_YAML.read_text())
    types: dict[str, Any] = {}
    for name, spec in declared["available_node_types"].items():
        if name == declared["head_node_type"]:
            types[FAKE_HEAD_TYPE] = {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0}
        else:
            types[name] = {
                "resources": {"CPU": WORKER_CPUS, "object_store_memory": 150 * 1024 * 1024},
                "node_config": {},
                "min_workers": spec.get("min_workers", 0),
                "max_workers": min(spec["max_workers"], MAX_WORKERS),
            }
    return {
        "cluster_name": "raydelta-fake",
        "max_workers": MAX_WORKERS,
        "provider": {
            "type": "fake_multinode",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "gcs_address": gcs_address,
        },
        "available_node_types": types,
        "head_node_type": FAKE_HEAD_TYPE,
        "auth": {},
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": IDLE_TIMEOUT_MINUTES,
        "docker": {},
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
    }

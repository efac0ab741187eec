"""The main job (``raydelta demo``) as a Ray job on a cluster.

Submit it from any machine that reaches the head's dashboard::

    ray job submit --address http://HEAD:8265 --working-dir raydelta/examples/ray_job \
        -- python main_job.py s3://bucket/raydelta-demo

The driver runs on the cluster (the job's entrypoint), attaches to it with
``raydelta.connect("auto")``, and runs the demo: concurrent Ray writers
append through the table's ``TableActor``, a V2 checkpoint is built by
shard tasks (on the cluster's CPU workers, which the autoscaler adds when
none is up), a VACUUM dry run, then a deltalake read-back. The table must
live where every node reaches it: object storage, or a shared filesystem.
The last line of the output is ``RESULT {json}``: the demo's numbers.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="raydelta's main job on a Ray cluster")
    parser.add_argument("dir", help="where the demo table goes (shared by every node)")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--commits", type=int, default=4, help="commits per writer")
    args = parser.parse_args(argv)

    import raydelta
    from raydelta.demo import run_demo

    raydelta.connect("auto")  # the cluster this job was submitted to
    result = run_demo(args.dir, writers=args.writers, commits_per_writer=args.commits, spark=False)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/pipeline: check the call, then run the whole pipeline as one spark-submit.

    scripts/pipeline [--profile cpu|gpu|gpu-explain] [--master URL] [--conf k=v] [pipeline args]

Pipeline args: see ``jobs/pipeline.py`` (--out, --input, --customers, --as-of, ...). Bad calls (unknown
profile, missing input folder, unwritable output, --customers 0) end in one line and exit 2, before any
table is written. Spark event logs go to <out>/eventlog, for Spark's history server, with each stage's memory
peaks (MEMORY_PEAKS).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs import launcher, pipeline
from jobs.errors import UserError


# The event log also keeps, per Spark stage and executor, the peaks of the executor's memory metrics (JVM heap,
# execution and storage memory, the resident memory of the JVM and its Python workers), sampled every 250 ms
# rather than at each 10 s heartbeat, which short stages would slip between: jobs/eventlog.py reads them per
# pipeline stage (scripts/bench-memory); the history server shows them per stage.
MEMORY_PEAKS = ("spark.eventLog.logStageExecutorMetrics=true", "spark.executor.metrics.pollingInterval=250ms",
                "spark.executor.processTreeMetrics.enabled=true")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/pipeline", add_help=False)
    p.add_argument("--profile", default="cpu")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--conf", action="append", default=[])
    p.add_argument("-h", "--help", action="store_true")
    ns, rest = p.parse_known_args(argv)
    if ns.help:
        print(__doc__)
        pipeline.parser().print_help()
        return 0
    with tempfile.TemporaryDirectory(prefix="pipeline-") as tmp:
        try:
            launcher.spark_submit_command(ns.profile, ns.master, "pipeline", [], ns.conf, Path(tmp))
            args = pipeline.validate(pipeline.parse(rest))
        except (launcher.SubmitError, UserError) as e:
            print(f"pipeline: error: {e}", file=sys.stderr)
            return 2
        except SystemExit as e:  # argparse already printed its one-line usage error
            return 2 if e.code else 0
        eventlog = Path(args.out).resolve() / "eventlog"
        eventlog.mkdir(parents=True, exist_ok=True)
        conf = [*ns.conf, "spark.eventLog.enabled=true", f"spark.eventLog.dir={eventlog.as_uri()}", *MEMORY_PEAKS]
        job_args = [*rest, "--as-of", args.as_of]
        cmd, env = launcher.spark_submit_command(ns.profile, ns.master, "pipeline", job_args, conf, Path(tmp))
        return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())

"""The pipeline's stages ingest..score several times over one input in one Spark application, each pass into its
own output folder: how much of a fresh application's time is the JVM warming up (class loading, the JIT compilers
turning Spark's code and the generated code into machine code), which an application that runs many inputs, or a
notebook's long-lived session, pays once. Each pass runs its stages as ``scripts/pipeline --input DIR`` does
(``Pipeline.run_stages``), without the report.

    scripts/submit tools/bench_passes.py --input DIR --out DIR [--passes 3]

Prints one line per pass and writes OUT/passes.json: each pass's seconds per stage and its whole run (ingest..score).
``scripts/bench-etl --passes N`` runs it beside the fresh pipeline and the peer and gives each pass's ratios.
"""
from __future__ import annotations

import argparse
import json
import os

from pyspark.sql import SparkSession

from jobs.run.pipeline import PIPELINE
from jobs.run.runner import Runner

MEASURED = ("ingest", "clean", "features", "train", "score")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tools/bench_passes.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="a CSV input folder (customers/, events/, manifest.json)")
    p.add_argument("--out", required=True, help="where each pass's tables go (pass-1/, pass-2/...) and passes.json")
    p.add_argument("--passes", type=int, default=3)
    a = p.parse_args(argv)
    spark = SparkSession.builder.getOrCreate()
    runner = Runner(spark)
    passes = []
    for n in range(1, a.passes + 1):
        args = PIPELINE.parse(["--input", a.input, "--out", os.path.join(a.out, f"pass-{n}")])
        records = PIPELINE.run_stages(runner, args, MEASURED)
        seconds = {name: records[name].seconds for name in MEASURED}
        passes.append({"pass": n, "stages": seconds, "whole_s": round(sum(seconds.values()), 2)})
        print(f"bench_passes: pass {n}: " + ", ".join(f"{s} {t:.1f}" for s, t in seconds.items())
              + f"; whole run {passes[-1]['whole_s']:.1f} s", flush=True)
    path = os.path.join(a.out, "passes.json")
    with open(path, "w") as f:
        json.dump({"input": os.path.abspath(a.input), "master": spark.sparkContext.master, "passes": passes}, f,
                  indent=2)
    print(f"bench_passes: saved {path}")


if __name__ == "__main__":
    main()

"""The profiles under conf/ (jobs.launch.profiles): base and profile merged, RAPIDS settings shared, and the
gpu-explain profile loading the RAPIDS plugin without a GPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.launch import profiles
from tests.support.sessions import ROOT, run_python


EXPLAIN_PROBE = r"""
import json, sys
from tests.support.sessions import build_session
from jobs.lake import plans
spark = build_session(sys.argv[1], sys.argv[2], app="explain-probe")
df = spark.sql(QUERY)
rows = [r.asDict() for r in df.orderBy("bucket").collect()]
report = plans.potential_gpu_plan(df) if sys.argv[1] == "gpu-explain" else ""
print("RESULT " + json.dumps({"rows": rows, "report": report,
      "plugins": spark.conf.get("spark.plugins", ""), "mode": spark.conf.get("spark.rapids.sql.mode", "")}))
"""
QUERY = ("SELECT id % 5 AS bucket, count(*) AS n, sum(id) AS total, "
         "max(regexp_extract(cast(id AS string), '([0-9])$', 1)) AS last_digit "
         "FROM range(1000) GROUP BY id % 5")


def run_probe(profile: str, tmp_path: Path) -> dict:
    code = EXPLAIN_PROBE.replace("QUERY", repr(QUERY))
    stdout = run_python(code, profile, str(tmp_path / profile))
    line = next(l for l in stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
def test_gpu_explain_profile_loads_the_rapids_plugin_without_a_gpu(spark, tmp_path):
    from jobs.lake import plans

    got = run_probe("gpu-explain", tmp_path)
    assert got["plugins"] == "com.nvidia.spark.SQLPlugin" and got["mode"] == "explainOnly"
    ops = plans.operators(got["report"])
    assert {"ShuffleExchangeExec", "RegExpExtract", "Sum"} <= set(ops), got["report"]
    # Same answer as the cpu profile (the fixture session), row for row.
    cpu_rows = [r.asDict() for r in spark.sql(QUERY).orderBy("bucket").collect()]
    assert got["rows"] == cpu_rows
    assert got["rows"][0] == {"bucket": 0, "n": 200, "total": 99500, "last_digit": "5"}


def test_profiles_merge_base_and_share_rapids_settings():
    cpu, gpu, explain = (profiles.load_profile(p) for p in ("cpu", "gpu", "gpu-explain"))
    assert cpu["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert gpu["spark.sql.extensions"] == explain["spark.sql.extensions"] == \
        "io.delta.sql.DeltaSparkSessionExtension,churn.spark.NestedArithmeticCheck"
    assert not profiles.uses_rapids(cpu)
    assert profiles.needs_gpu(gpu) and not profiles.needs_gpu(explain) and profiles.uses_rapids(explain)
    assert gpu["spark.sql.files.maxPartitionBytes"] == "512m"  # rapids.conf overrides base
    assert gpu["spark.executor.resource.gpu.discoveryScript"] == str(ROOT / "conf" / "get-gpus-resources.sh")
    shared = profiles.read_conf(ROOT / "conf" / "rapids.conf")
    assert all(explain[k] == v == gpu[k] for k, v in shared.items())


def test_the_gpu_executors_keep_every_base_option_and_add_the_trap_limit():
    # gpu.conf restates base.conf's executor options (a profile's key replaces base's whole): none may be lost when
    # base.conf's change, and only the gpu profile's executors get C2's trap limit.
    cpu, gpu = (profiles.load_profile(p)["spark.executor.extraJavaOptions"].split() for p in ("cpu", "gpu"))
    assert "-XX:PerMethodTrapLimit=0" not in cpu
    assert gpu == [*cpu, "-XX:PerMethodTrapLimit=0"]
    assert profiles.load_profile("gpu-explain")["spark.executor.extraJavaOptions"].split() == cpu

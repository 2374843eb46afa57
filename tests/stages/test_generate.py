"""The generate stage: byte-identical output whatever the partitioning or the profile, defect counts that an
independent parser (tests/support/csv_oracle.py) agrees with, a calibrated churn rate, argument errors, a session
without the generator's jar."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.stages import generate
from tests.support import csv_oracle
from tests.support.sessions import run_python

SMALL = dict(customers=600, seed=11, as_of="2026-06-30", churn_rate=0.2, defect_rate=0.12, rows_per_file=400)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): _sha(p) for d in ("customers", "events") for p in sorted((out / d).iterdir())}


@pytest.fixture(scope="module")
def plain_runs(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("gen")
    outs = {}
    for parts in (2, 5):
        out = base / f"p{parts}"
        outs[parts] = (out, generate.STAGE(spark, str(out), partitions=parts, **SMALL).extra["manifest"])
    return outs


@pytest.fixture(scope="module")
def gzip_runs(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("gengz")
    outs = {}
    for parts in (1, 3):
        out = base / f"p{parts}"
        outs[parts] = (out, generate.STAGE(spark, str(out), partitions=parts, compression="gzip",
                                           **{**SMALL, "customers": 300, "rows_per_file": 1500}).extra["manifest"])
    return outs


def test_output_is_byte_identical_whatever_the_partitioning(plain_runs):
    (a, ma), (b, mb) = plain_runs[2], plain_runs[5]
    assert _files(a) == _files(b)
    assert ma == mb
    assert json.loads((a / "manifest.json").read_text()) == ma
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    # several files per dataset, named in order, nothing else left behind
    assert sorted(ma["datasets"]["customers"]["files"]) == ["customers-00000.csv", "customers-00001.csv"]
    assert len(ma["datasets"]["events"]["files"]) > 3
    assert sorted(p.name for p in a.iterdir()) == ["_truth", "customers", "events", "manifest.json"]
    assert not [p for p in a.rglob("*") if p.name.startswith(".") or p.name == "_SUCCESS"]


def test_gzip_output_is_byte_identical_too(gzip_runs):
    (a, ma), (b, mb) = gzip_runs[1], gzip_runs[3]
    assert _files(a) == _files(b)
    assert ma == mb
    assert list(ma["datasets"]["customers"]["files"]) == ["customers-00000.csv.gz"]


@pytest.mark.parametrize("runs", ["plain_runs", "gzip_runs"])
def test_manifest_counts_match_an_independent_parse_of_the_files(runs, request):
    out, manifest = request.getfixturevalue(runs)[1 if runs == "gzip_runs" else 2]
    oracle = csv_oracle.classify(out, manifest["generator"]["as_of"])
    for dataset in ("customers", "events"):
        m, o = manifest["datasets"][dataset], oracle[dataset]
        assert {name: f["records"] for name, f in m["files"].items()} == o["per_file"]
        assert m["records"] == o["records"]
        assert m["defects"] == o["defects"]
        assert m["expected"] == {"quarantined": o["quarantined"], "duplicates_removed": o["duplicates_removed"],
                                 "kept": o["kept"]}
        for name, f in m["files"].items():   # records and bytes per file; checksums are the tests' own (_sha)
            assert f == {"records": o["per_file"][name], "bytes": (out / dataset / name).stat().st_size}
    if runs == "plain_runs":   # with 12% dirt on 600 customers every kind shows up
        for dataset in ("customers", "events"):
            assert all(v > 0 for v in manifest["datasets"][dataset]["defects"].values()), dataset
        assert manifest["datasets"]["events"]["expected"]["quarantined"]["customer_rejected"] > 0


def test_truth_agrees_with_the_files_and_the_manifest(spark, plain_runs):
    out, manifest = plain_runs[2]
    truth = spark.read.parquet(str(out / "_truth"))
    oracle = csv_oracle.classify(out, manifest["generator"]["as_of"])
    rejected = {r["customer_id"] for r in truth.where("rejected").select("customer_id").collect()}
    assert rejected == oracle["customers"]["rejected_ids"]
    assert truth.count() == SMALL["customers"]
    churn = manifest["churn"]
    assert churn["customers_in_gold"] == SMALL["customers"] - len(rejected)
    assert churn["label_window_days"] == 90 and 0.7 < churn["oracle_auc"] < 0.95
    # churners (and only they) have a termination event, inside (cutoff, as_of]
    events = spark.read.option("header", True).option("multiLine", True).option("escape", '"') \
        .csv(str(out / "events")).where(F.trim(F.lower("event_type")) == "termination")
    terminated = {r["customer_id"] for r in events.select("customer_id").collect()}
    churned = {r["customer_id"] for r in truth.where("churned").select("customer_id").collect()}
    assert terminated == churned
    ts = [r["event_ts"] for r in events.select("event_ts").collect()]
    assert all("2026-04-02" <= t < "2026-06-30" for t in ts)


@pytest.mark.parametrize("calibration_customers", [generate.CALIBRATION_CUSTOMERS, 50_000])
def test_realised_churn_rate_is_within_half_a_point_at_100k_customers(spark, monkeypatch, calibration_customers):
    # 50,000: b0 calibrated on the first half of the customers only, as it is on the first 250,000 of larger runs
    monkeypatch.setattr(generate, "CALIBRATION_CUSTOMERS", calibration_customers)
    truth = generate.truth_frame(spark, 100_000, seed=7, churn_rate=0.2)
    rate = truth.agg(F.avg(F.col("churned").cast("double"))).first()[0]
    assert abs(rate - 0.2) < 0.005


GENERATE_WITHOUT_THE_JAR = r"""
import sys
from pyspark.sql import SparkSession
from jobs.stages import generate
from jobs.core.errors import UserError
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
try:
    generate.STAGE(spark, sys.argv[1], customers=10)
except UserError as e:
    print("UserError:", e)
"""


def test_a_session_without_the_generator_jar_gets_the_fix_and_nothing_is_written(tmp_path):
    # A session built by hand (a notebook) rather than by scripts/submit or tests/support/sessions.py lacks the jar.
    out = tmp_path / "gen"
    said = run_python(GENERATE_WITHOUT_THE_JAR, str(out), timeout=180)
    line = next(x for x in said.splitlines() if x.startswith("UserError:"))
    assert "churn.generate.Source" in line and "scripts/setup" in line and "churn-jvm.jar" in line
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("kwargs, fix", [
    (dict(customers=0), "--customers"),
    (dict(customers=10, churn_rate=1.0), "--churn-rate"),
    (dict(customers=10, defect_rate=-0.1), "--defect-rate"),
    (dict(customers=10, as_of="2026-02-30"), "yyyy-MM-dd"),
    (dict(customers=10, compression="zip"), "none or gzip"),
    (dict(customers=10, rows_per_file=0), "--rows-per-file"),
    (dict(customers=10, rates={"bogus": 0.1}), "kinds:"),
])
def test_bad_arguments_raise_user_error_and_write_nothing(spark, tmp_path, kwargs, fix):
    out = tmp_path / "never"
    with pytest.raises(UserError, match=fix):
        generate.STAGE(spark, str(out), **kwargs)
    assert not out.exists()


def test_cli_refuses_an_existing_data_set_without_overwrite(spark, tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match="--overwrite"):
        generate.STAGE(spark, **generate.STAGE.parse(["--out", str(tmp_path), "--customers", "10"]))
    with pytest.raises(UserError, match="--customers"):
        generate.STAGE(spark, **generate.STAGE.parse(["--out", str(tmp_path / "x"), "--customers", "-5"]))
    assert not (tmp_path / "x").exists()


GENERATE_UNDER_RAPIDS = r"""
import json, sys
from tests.support.sessions import build_session
from jobs.stages import generate
spark = build_session("gpu-explain", sys.argv[1], app="generate-rapids")
generate.STAGE(spark, sys.argv[2], partitions=2, **json.loads(sys.argv[3]))
"""


@pytest.mark.slow
def test_generate_runs_under_a_rapids_profile_with_the_same_bytes(plain_runs, tmp_path):
    # The RAPIDS plugin 25.04 failed while planning generate's observe() ("Found an aggregation function in an
    # unexpected context"), even in explain-only mode, so `scripts/pipeline --profile gpu` could not generate.
    out = tmp_path / "gen"
    run_python(GENERATE_UNDER_RAPIDS, str(tmp_path / "wh"), str(out), json.dumps(SMALL), timeout=600)
    cpu_out, cpu_manifest = plain_runs[2]
    assert _files(out) == _files(cpu_out)
    assert json.loads((out / "manifest.json").read_text())["datasets"] == cpu_manifest["datasets"]

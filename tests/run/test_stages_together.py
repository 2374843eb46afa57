"""The ETL stages together. Generated dirty data through ingest -> clean -> features: every record accounted for
against the generator's manifest, every stage idempotent, gold readable outside Spark. Then the three stages on a
relative lake path."""
from __future__ import annotations

import os

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from jobs.lake import delta_io
from jobs.lake.contract import DATASETS, ID, LABEL
from jobs.stages import clean, features, ingest
from tests.support.etl_inputs import CUSTOMERS_HEADER, EVENTS_HEADER, good_customer_line, write_input

AS_OF = "2026-06-30"
TABLES = ("bronze_customers", "bronze_events", "quarantine", "silver_customers", "silver_events",
          "gold_features")


@pytest.fixture(scope="module")
def generated(spark, tmp_path_factory):
    generate = pytest.importorskip("jobs.stages.generate",
                                   reason="the generator (jobs/stages/generate.py) has not landed")
    root = tmp_path_factory.mktemp("etl")
    out, lake = str(root / "raw"), str(root / "lake")
    manifest = generate.STAGE(spark, out, customers=1500, as_of=AS_OF, defect_rate=0.08,
                              rows_per_file=2000).extra["manifest"]
    records = {"ingest": ingest.run(spark, out, lake), "clean": clean.run(spark, lake, AS_OF),
               "features": features.run(spark, lake, AS_OF)}
    return manifest, records, out, lake


@pytest.mark.slow
def test_every_record_is_accounted_for_per_file_and_per_defect_kind(spark, generated):
    manifest, records, _, lake = generated
    ing, cl = records["ingest"].counts, records["clean"].counts
    quarantine = spark.read.format("delta").load(delta_io.table_path(lake, "quarantine"))
    by_reason = {(r["dataset"], r["reason"]): r["n"] for r in
                 quarantine.groupBy("dataset", "reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    for ds in DATASETS:
        m = manifest["datasets"][ds]
        expected = m["expected"]
        # per file: records read = records written; ingest's bronze rows = clean's bronze rows
        assert {f: v["records"] for f, v in ing["files"][ds].items()} == \
               {f: v["records"] for f, v in m["files"].items()}, ds
        assert {f: v["bronze"] for f, v in ing["files"][ds].items()} == \
               {f: v["bronze"] for f, v in cl["files"][ds].items()}, ds
        # per defect kind / quarantine reason, over both stages
        got = {reason: n for (d, reason), n in by_reason.items() if d == ds}
        assert got == {r: n for r, n in expected["quarantined"].items() if n}, ds
        assert cl["totals"][ds]["duplicates_removed"] == expected["duplicates_removed"], ds
        assert cl["totals"][ds]["silver"] == expected["kept"], ds
        # in = kept + quarantined + duplicates, exactly
        assert m["records"] == (cl["totals"][ds]["silver"] + sum(got.values())
                                + cl["totals"][ds]["duplicates_removed"]), ds


@pytest.mark.slow
def test_gold_matches_the_generator_truth_and_opens_outside_spark(spark, generated):
    import deltalake

    manifest, records, out, lake = generated
    path = delta_io.table_path(lake, "gold_features")
    gold = spark.read.format("delta").load(path)
    n = gold.count()
    assert n == records["features"].counts["customers"] == manifest["churn"]["customers_in_gold"]
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == n
    # The label is the generator's latent churn outcome for every customer that reached gold.
    truth = (spark.read.parquet(f"{out}/_truth").where(~F.col("rejected"))
             .select(ID, F.col("churned").cast("double").alias(LABEL)))
    assert_df_equality(gold.select(ID, LABEL), truth, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.slow
def test_running_each_stage_again_leaves_every_table_unchanged(spark, generated):
    _, _, out, lake = generated
    before = {t: delta_io.version(spark, delta_io.table_path(lake, t)) for t in TABLES}
    ingest.run(spark, out, lake)
    clean.run(spark, lake, AS_OF)
    features.run(spark, lake, AS_OF)
    for t in TABLES:
        path = delta_io.table_path(lake, t)
        assert delta_io.version(spark, path) > before[t], t   # really rewritten ...
        old, _ = delta_io.read(spark, path, before[t])
        new, _ = delta_io.read(spark, path)
        assert_df_equality(new, old, ignore_row_order=True)   # ... to the same contents


def test_stages_take_a_relative_lake_path(spark, tmp_path):
    """ingest -> clean -> features with relative --input/--lake (the README's runs/latest): versions are read
    through delta_io, which resolves relative paths itself. Relative to the process's start directory, which
    the JVM shares (no chdir)."""
    customers = CUSTOMERS_HEADER + "\n" + good_customer_line("C1") + "\n"
    events = EVENTS_HEADER + "\nE1,C1,2026-03-01 12:00:00,charge,10.00,web,\nE2,C1,short\n"
    inp = os.path.relpath(write_input(tmp_path / "in", customers, {"events-00000.csv": events}))
    lake = os.path.relpath(tmp_path / "lake")
    assert not os.path.isabs(lake)

    ing = ingest.run(spark, inp, lake)
    cl = clean.run(spark, lake, AS_OF)
    ft = features.run(spark, lake, AS_OF)

    assert ing.counts["totals"]["events"] == {"records": 2, "bronze": 1, "quarantined": 1}
    assert cl.read == {"bronze_customers": ing.wrote["bronze_customers"],
                       "bronze_events": ing.wrote["bronze_events"], "quarantine": ing.wrote["quarantine"]}
    assert ft.counts["customers"] == 1
    assert spark.read.format("delta").load(str(tmp_path / "lake" / "gold" / "customer_features")).count() == 1

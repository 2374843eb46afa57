"""Train stage: gold features -> logistic regression model, metrics and run metadata.

    scripts/submit --profile cpu train --lake data/lake --models-dir data/models [--manifest data/raw/manifest.json]

- Split: by a hash of customer_id (``pmod(xxhash64(customer_id), 100)``: < 70 train, < 85 validation, else test),
  so a customer lands in the same part on every run, engine and partitioning.
- Tuning: one model per (regParam, elasticNetParam), all fitted by one ``fitMultiple`` (spark-rapids-ml moves
  the data to the GPU once for the whole grid). The winner is the most regularised model whose validation ROC
  AUC is within ``SELECTION_AUC_TOLERANCE`` of the best: the features are correlated (monthly charge, average
  charge, charge totals), so a (nearly) unregularised fit sits on a flat ridge where two optimisers (MLlib
  L-BFGS, cuML QN) stop at different coefficients with the same AUC, and AUCs equal to 1e-4 must not pick
  the model by noise. (H200 run 3: regParam 0 and 0.001 both 0.8119, 0.01 0.8117.)
- Class imbalance: no class weights (spark-rapids-ml has no weightCol on the GPU). The unweighted model's
  probabilities stay calibrated; the decision threshold is the one with the best F1 on validation.
- Output: ``<models-dir>/<run_id>/model`` (plain pyspark.ml PipelineModel, CPU-loadable whatever trained it),
  ``<models-dir>/<run_id>/run.json`` and one row in the runs Delta table (appended once per run_id).
  ``models-dir`` is a local (or mounted) folder: run.json is written with plain Python.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from importlib import metadata as pkg_metadata
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import contract, delta_io, evaluate, ml
from jobs.errors import UserError

TRAIN_BELOW, VALIDATION_BELOW = 70, 85  # hash buckets 0..99
DEFAULT_REG_PARAMS = (0.0, 0.001, 0.01)
DEFAULT_ELASTIC_NET = (0.0,)
# Convergence: at tol 1e-6 MLlib's L-BFGS stops on the flat, correlated objective with coefficients up to 15%
# from the optimum (late_payments_90d, 208k rows of a 1M-customer gold table); at 1e-9 within 9e-4 of the
# 1e-12 solution, for 63 iterations instead of 43. Two optimisers (MLlib L-BFGS, cuML QN) can only agree to
# 1e-3 where both have converged, so the default is tighter than that, with room in max_iter.
DEFAULT_TOL = 1e-10
DEFAULT_MAX_ITER = 300
SELECTION_AUC_TOLERANCE = 0.0005  # validation AUC a more regularised model may give up (see the docstring)
RUNS_APP_ID = "train"
# Spark properties recorded in run.json because they change how or where the model is fitted.
RECORDED_PROPERTIES = (ml.IMPLEMENTATION_KEY, ml.FALLBACK_KEY, ml.FLOAT32_INPUTS_KEY, "spark.master", "spark.plugins",
                       "spark.rapids.sql.enabled", "spark.rapids.sql.mode", "spark.executor.instances",
                       "spark.executor.cores", "spark.executor.resource.gpu.amount", "spark.sql.shuffle.partitions")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="train", description=__doc__.split("\n\n")[0])
    p.add_argument("--lake", required=True, help="lake root holding the gold table")
    p.add_argument("--models-dir", required=True, help="folder for <run_id>/model and <run_id>/run.json")
    p.add_argument("--run-id", help="default: derived from the gold version and the parameters")
    p.add_argument("--reg-params", type=_floats, default=DEFAULT_REG_PARAMS, help="comma-separated regParam grid")
    p.add_argument("--elastic-net", type=_floats, default=DEFAULT_ELASTIC_NET, help="comma-separated elasticNetParam grid")
    p.add_argument("--max-iter", type=int, default=DEFAULT_MAX_ITER)
    p.add_argument("--tol", type=float, default=DEFAULT_TOL, help="convergence tolerance of both back ends")
    p.add_argument("--manifest", help="generator manifest.json: its churn.oracle_auc is set beside the test AUC")
    args = p.parse_args(argv)
    from jobs.session import get_spark

    record = run(get_spark("train"), args.lake, args.models_dir, args.run_id, args.reg_params, args.elastic_net,
                 args.max_iter, args.manifest, args.tol)
    print(json.dumps({"run_id": record.extra["run_id"], "model": record.extra["model_path"],
                      "test": {k: record.extra["test"][k] for k in ("roc_auc", "pr_auc", "log_loss")},
                      "oracle_auc": record.extra["oracle_auc"]}))
    return 0


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def run(spark: SparkSession, lake: str, models_dir: str, run_id: str | None = None,
        reg_params: tuple[float, ...] = DEFAULT_REG_PARAMS, elastic_net: tuple[float, ...] = DEFAULT_ELASTIC_NET,
        max_iter: int = DEFAULT_MAX_ITER, manifest: str | None = None,
        tol: float = DEFAULT_TOL) -> delta_io.StageRecord:
    started = time.time()
    timings: dict[str, float] = {}
    oracle_auc = read_oracle_auc(manifest)
    t0 = time.time()
    gold, gold_version = extract(spark, lake)
    timings["read_gold"] = round(time.time() - t0, 3)
    params = {"reg_params": list(reg_params), "elastic_net": list(elastic_net), "max_iter": max_iter, "tol": tol,
              "features": list(contract.FEATURES), "split": [TRAIN_BELOW, VALIDATION_BELOW]}
    run_id = run_id or default_run_id(gold_version, params)
    check_run_id_reuse(models_dir, run_id, gold_version, params)

    # Build every estimator before any work, so a bad parameter stops early; the back end's pre-fit check (for
    # spark-rapids-ml a probe task that also warms the Python worker the fit will use) runs beside the split
    # count, and a missing GPU stops the stage before any fit.
    t0 = time.time()
    trainers = estimators(spark, reg_params, elastic_net, max_iter, tol)
    trainer = next(iter(trainers.values()))
    trainer.check_can_fit(wait=False)
    timings["build_estimators"] = round(time.time() - t0, 3)
    split = gold.transform(with_split)
    train_df = split.where(F.col("split") == "train").select(contract.LABEL, *contract.FEATURES)
    validation = split.where(F.col("split") == "validation")
    test = split.where(F.col("split") == "test")
    t0 = time.time()
    counts = {name: n for name, n in split.groupBy("split").count().collect()}  # three rows
    timings["split_counts"] = round(time.time() - t0, 3)
    t0 = time.time()
    trainer.check_can_fit()  # spark-rapids-ml: waits for the GPU probe's verdict
    timings["check_wait"] = round(time.time() - t0, 3)
    if not counts.get("train") or not counts.get("validation") or not counts.get("test"):
        raise UserError(f"gold has too few customers to split into train/validation/test ({counts}): "
                        f"generate more customers")

    t0 = time.time()
    grid = [{"regParam": reg, "elasticNetParam": enet} for reg, enet in trainers]
    fitted = trainer.fit_grid(train_df, grid)
    timings["fit_grid"] = round(time.time() - t0, 3)
    print(f"train: {len(grid)} model(s) fitted in {timings['fit_grid']:.1f}s ({fitted[0].implementation})")
    # Every model's validation AUC from one scan of the validation rows.
    t0 = time.time()
    probabilities = [f"p{i}" for i in range(len(fitted))]
    areas = evaluate.ranking_areas_of(
        validation.select(F.col(contract.LABEL), *[m.probability().alias(c) for m, c in zip(fitted, probabilities)]),
        probabilities, contract.LABEL)
    candidates = []
    for overrides, model, (auc, _) in zip(grid, fitted, areas):
        candidates.append({**overrides, "validation_roc_auc": auc, "model": model})
        print(f"train: regParam={overrides['regParam']} elasticNetParam={overrides['elasticNetParam']} "
              f"validation AUC={auc:.4f}")
    timings["validation_aucs"] = round(time.time() - t0, 3)
    best = choose(candidates)
    model: ml.FittedLogisticRegression = best["model"]
    timings["fit_and_tune"] = round(time.time() - started, 3)

    t0 = time.time()
    validation_scored = scored(validation, model).cache()
    threshold, validation_f1 = evaluate.best_f1_threshold(validation_scored)
    validation_scored.unpersist()
    test_scored = scored(test, model).cache()
    test_metrics = evaluate.all_metrics(test_scored, threshold)
    test_scored.unpersist()
    timings["evaluate"] = round(time.time() - t0, 3)

    run_dir = os.path.join(models_dir, run_id)
    model_path = model.save(os.path.join(run_dir, "model"))
    run_info = {
        "run_id": run_id,
        "implementation": model.implementation,
        "versions": package_versions(),
        "spark_properties": {k: spark.conf.get(k, None) for k in RECORDED_PROPERTIES},
        "params": {**params, "chosen": {"regParam": best["regParam"], "elasticNetParam": best["elasticNetParam"]}},
        "tuning": [{k: v for k, v in c.items() if k != "model"} for c in candidates],
        "threshold": threshold,
        "gold": {"path": delta_io.table_path(lake, "gold_features"), "version": gold_version},
        "split_counts": counts,
        "metrics": {"test": test_metrics,
                    "validation": {"roc_auc": best["validation_roc_auc"], "f1_at_threshold": validation_f1}},
        "oracle_auc": oracle_auc,
        "test_auc_gap_to_oracle": None if oracle_auc is None else oracle_auc - test_metrics["roc_auc"],
        "coefficients": model.coefficients_by_name(),
        "intercept": model.intercept,
        "model_path": model_path,
    }
    timings["total"] = round(time.time() - started, 3)
    run_info["timings"] = timings
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "run.json").write_text(json.dumps(run_info, indent=2, sort_keys=True, default=str))

    runs_path = delta_io.table_path(lake, "runs")
    runs_version = delta_io.append_once(runs_row(spark, run_info), runs_path, *runs_txn(run_id))
    record = delta_io.StageRecord(
        stage="train",
        read={"gold_features": gold_version},
        wrote={"runs": runs_version},
        counts={**counts, "test_roc_auc": test_metrics["roc_auc"], "test_pr_auc": test_metrics["pr_auc"],
                **({"oracle_auc": oracle_auc} if oracle_auc is not None else {})},
        seconds=round(time.time() - started, 3),
        extra={**{k: run_info[k] for k in ("run_id", "implementation", "threshold", "oracle_auc", "model_path")},
               "test": test_metrics, "run_json": str(Path(run_dir) / "run.json")},
    )
    record.save(lake)
    return record


def choose(candidates: list[dict]) -> dict:
    """The most regularised candidate (largest regParam, then elasticNetParam) whose validation AUC is within
    ``SELECTION_AUC_TOLERANCE`` of the best one's."""
    top = max(c["validation_roc_auc"] for c in candidates)
    near = [c for c in candidates if c["validation_roc_auc"] >= top - SELECTION_AUC_TOLERANCE]
    return max(near, key=lambda c: (c["regParam"], c["elasticNetParam"]))


def estimators(spark: SparkSession, reg_params: tuple[float, ...], elastic_net: tuple[float, ...],
               max_iter: int, tol: float = DEFAULT_TOL) -> dict[tuple[float, float], ml.LogisticRegressionTrainer]:
    """One estimator per (regParam, elasticNetParam), for whichever back end the profile names."""
    trainers = {(r, e): ml.logistic_regression(spark, contract.FEATURES, regParam=r, elasticNetParam=e,
                                                maxIter=max_iter, tol=tol, standardization=True,
                                                fitIntercept=True, labelCol=contract.LABEL)
                for r in reg_params for e in elastic_net}
    if not trainers:
        raise UserError("empty parameter grid: give at least one --reg-params and one --elastic-net value")
    return trainers


def extract(spark: SparkSession, lake: str) -> tuple[DataFrame, int]:
    path = delta_io.table_path(lake, "gold_features")
    try:
        gold, version = delta_io.read(spark, path)
    except FileNotFoundError as e:
        raise UserError(str(e)) from None
    missing = [c for c in (contract.ID, contract.LABEL, *contract.FEATURES) if c not in gold.columns]
    if missing:
        raise UserError(f"gold table {path} lacks columns {', '.join(missing)}: rebuild it with the features stage")
    return gold, version


def with_split(df: DataFrame) -> DataFrame:
    """Adds ``split`` (train / validation / test), a pure function of customer_id."""
    bucket = F.pmod(F.xxhash64(F.col(contract.ID)), F.lit(100))
    return df.withColumn("split", F.when(bucket < TRAIN_BELOW, "train")
                                   .when(bucket < VALIDATION_BELOW, "validation")
                                   .otherwise("test"))


def scored(df: DataFrame, model: ml.FittedLogisticRegression) -> DataFrame:
    return df.select(F.col(contract.LABEL).alias(evaluate.LABEL), model.probability().alias(evaluate.PROBABILITY))


def default_run_id(gold_version: int, params: dict) -> str:
    """Same gold version and parameters -> same run id (so a re-run replaces, never duplicates)."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return f"gold-v{gold_version}-{digest}"


def check_run_id_reuse(models_dir: str, run_id: str, gold_version: int, params: dict) -> None:
    """A run id names one (gold version, parameters): re-running it redoes the same run, anything else is refused,
    since its runs row would be kept (append_once) while its model was replaced."""
    previous = Path(models_dir) / run_id / "run.json"
    if not previous.is_file():
        return
    info = json.loads(previous.read_text())
    before = {k: v for k, v in info["params"].items() if k != "chosen"}
    if before != params or info["gold"]["version"] != gold_version:
        raise UserError(f"run id {run_id!r} already names a run with other parameters or gold version ({previous}): "
                        f"pass a new --run-id, or leave it out to derive one from the gold version and parameters")


def runs_txn(run_id: str) -> tuple[str, int]:
    """(txnAppId, txnVersion) for the runs-table append of ``run_id``.

    Delta skips an append whose txnVersion is <= the last one committed for the same app id, so versions
    hashed from run ids under one shared app id would silently drop any later run whose hash is smaller.
    Hence one app id per run ("train:<run_id>") with a fixed version: a re-run of the same run_id is skipped,
    every other run is appended."""
    return f"{RUNS_APP_ID}:{run_id}", 0


def runs_row(spark: SparkSession, info: dict) -> DataFrame:
    test = info["metrics"]["test"]
    row = (info["run_id"], info["implementation"], int(info["gold"]["version"]), float(test["roc_auc"]),
           float(test["pr_auc"]), float(test["log_loss"]), float(info["threshold"]),
           None if info["oracle_auc"] is None else float(info["oracle_auc"]), info["model_path"],
           json.dumps({k: v for k, v in info.items() if k != "coefficients"}, sort_keys=True, default=str),
           json.dumps(info["coefficients"], sort_keys=True))
    schema = ("run_id string, implementation string, gold_version long, test_roc_auc double, test_pr_auc double, "
              "test_log_loss double, threshold double, oracle_auc double, model_path string, run_json string, "
              "coefficients_json string")
    return spark.createDataFrame([row], schema).withColumn("trained_at", F.current_timestamp())


def read_oracle_auc(manifest: str | None) -> float | None:
    if manifest is None:
        return None
    try:
        data = json.loads(Path(manifest).read_text())
    except FileNotFoundError:
        raise UserError(f"manifest {manifest} does not exist: pass the generator's manifest.json or leave --manifest out") from None
    except json.JSONDecodeError as e:
        raise UserError(f"manifest {manifest} is not JSON ({e}): pass the generator's manifest.json") from None
    value = (data.get("churn") or {}).get("oracle_auc")
    return None if value is None else float(value)


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in ("pyspark", "delta-spark", "spark-rapids-ml"):
        try:
            versions[name] = pkg_metadata.version(name)
        except pkg_metadata.PackageNotFoundError:
            versions[name] = None
    return versions

"""Train stage: gold features -> logistic regression model, metrics and run metadata.

    scripts/submit train --lake data/lake --models-dir data/models [--manifest data/raw/manifest.json]

- Split: ``jobs.ml.split`` (a hash of customer_id: 70 / 15 / 15).
- Tuning: one model per (regParam, elasticNetParam), fitted by ``LogisticRegressionTrainer.fit_grid``
  (spark-rapids-ml: one ``fitMultiple``, the data moved to the GPU once for the whole grid; MLlib: the fits side
  by side). The winner is the most regularised model whose validation ROC
  AUC is within ``SELECTION_AUC_TOLERANCE`` of the best: the features are correlated (monthly charge, average
  charge, charge totals), so a (nearly) unregularised fit sits on a flat ridge where two optimisers (MLlib
  L-BFGS, cuML QN) stop at different coefficients with the same AUC (regParam 0 and 0.001 agree to 1e-4), and
  AUCs that close must not pick the model by noise.
- Class imbalance: no class weights (spark-rapids-ml has no weightCol on the GPU). The unweighted model's
  probabilities stay calibrated; the decision threshold is the one with the best F1 on validation.
- Output: ``<models-dir>/<run_id>/model`` (plain pyspark.ml PipelineModel, CPU-loadable whatever trained it),
  ``<models-dir>/<run_id>/run.json`` and one row in the runs Delta table (appended once per run_id).
  ``models-dir`` is a local (or mounted) folder: run.json is written with plain Python.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from importlib import metadata as pkg_metadata
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.core.params import LAKE, MANIFEST, MODELS_DIR, floats
from jobs.core.stage import Param, Stage, StageRecord
from jobs.lake import contract, delta_io
from jobs.lake.session import rescanned
from jobs.ml import estimators, evaluate
from jobs.ml.split import TRAIN_BELOW, VALIDATION_BELOW, with_split

# Convergence: at tol 1e-6 MLlib's L-BFGS stops on the flat, correlated objective with coefficients up to 15%
# from the optimum (late_payments_90d, 208k rows of a 1M-customer gold table); at 1e-9 within 9e-4 of the
# 1e-12 solution, for 63 iterations instead of 43. Two optimisers (MLlib L-BFGS, cuML QN) can only agree to
# 1e-3 where both have converged, so the default is tighter than that, with room in max_iter.
PARAMS = (
    LAKE, MODELS_DIR,
    Param("run_id", "run id (default: derived from the gold version and the parameters)", default=None),
    Param("reg_params", "comma-separated regParam grid", default=(0.0, 0.001, 0.01), parse=floats),
    Param("elastic_net", "comma-separated elasticNetParam grid", default=(0.0,), parse=floats),
    Param("max_iter", "iterations at most", default=300, parse=int),
    MANIFEST,
    Param("tol", "convergence tolerance of both back ends", default=1e-10, parse=float),
)
SELECTION_AUC_TOLERANCE = 0.0005  # validation AUC a more regularised model may give up (see the docstring)
RUNS_APP_ID = "train"
# Spark properties recorded in run.json because they change how or where the model is fitted.
RECORDED_PROPERTIES = (estimators.IMPLEMENTATION_KEY, estimators.FALLBACK_KEY, estimators.FLOAT32_INPUTS_KEY,
                       "spark.master", "spark.plugins", "spark.rapids.sql.enabled", "spark.rapids.sql.mode",
                       "spark.executor.instances", "spark.executor.cores", "spark.executor.resource.gpu.amount",
                       "spark.sql.shuffle.partitions")


def run(spark: SparkSession, lake: str, models_dir: str, run_id: str | None, reg_params: tuple[float, ...],
        elastic_net: tuple[float, ...], max_iter: int, manifest: str | None, tol: float) -> StageRecord:
    timings: dict[str, float] = {}
    started = time.time()
    oracle_auc = read_oracle_auc(manifest)
    with timed(timings, "read_gold"):
        gold, gold_version = extract(spark, lake)
    params = {"reg_params": list(reg_params), "elastic_net": list(elastic_net), "max_iter": max_iter, "tol": tol,
              "features": list(contract.FEATURES), "split": [TRAIN_BELOW, VALIDATION_BELOW]}
    split = gold.transform(with_split)
    with timed(timings, "split_counts"):
        counts, fingerprint = split_counts(split)
    run_id = run_id or default_run_id(fingerprint, params)
    check_run_id_reuse(models_dir, run_id, fingerprint, params)

    # Build every estimator before any work, so a bad parameter stops early; the back end's pre-fit check (for
    # spark-rapids-ml a probe task that also warms the Python worker the fit will use) runs beside the split
    # count, and a missing GPU stops the stage before any fit.
    with timed(timings, "build_estimators"):
        trainers = estimators_for(spark, reg_params, elastic_net, max_iter, tol)
        trainer = next(iter(trainers.values()))
        trainer.check_can_fit(wait=False)
    with timed(timings, "check_wait"):
        trainer.check_can_fit()  # spark-rapids-ml: waits for the GPU probe's verdict

    grid = [{"regParam": reg, "elasticNetParam": enet} for reg, enet in trainers]
    with timed(timings, "fit_grid"):
        fitted = trainer.fit_grid(split.where(F.col("split") == "train").select(contract.LABEL, *contract.FEATURES),
                                  grid)
    print(f"train: {len(grid)} model(s) fitted in {timings['fit_grid']:.1f}s ({fitted[0].implementation})")
    with timed(timings, "validation_aucs"):
        candidates = validated(grid, fitted, split.where(F.col("split") == "validation"), max_iter)
    best = choose(candidates)
    model: estimators.FittedLogisticRegression = best["model"]
    timings["fit_and_tune"] = round(time.time() - started, 3)
    with timed(timings, "evaluate"):
        threshold, validation_f1, test_metrics = evaluated(model, split)

    run_dir = os.path.join(models_dir, run_id)
    run_info = {
        "run_id": run_id,
        "implementation": model.implementation,
        "versions": package_versions(),
        "spark_properties": {k: spark.conf.get(k, None) for k in RECORDED_PROPERTIES},
        "params": {**params, "chosen": {"regParam": best["regParam"], "elasticNetParam": best["elasticNetParam"]}},
        "tuning": [{k: v for k, v in c.items() if k != "model"} for c in candidates],
        "threshold": threshold,
        "gold": {"path": delta_io.table_path(lake, "gold_features"), "version": gold_version,
                 "fingerprint": fingerprint},
        "split_counts": counts,
        "metrics": {"test": test_metrics,
                    "validation": {"roc_auc": best["validation_roc_auc"], "f1_at_threshold": validation_f1}},
        "oracle_auc": oracle_auc,
        "test_auc_gap_to_oracle": None if oracle_auc is None else oracle_auc - test_metrics["roc_auc"],
        "coefficients": model.coefficients_by_name(),
        "intercept": model.intercept,
        "model_path": model.save(os.path.join(run_dir, "model")),
    }
    timings["total"] = round(time.time() - started, 3)
    run_info["timings"] = timings
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "run.json").write_text(json.dumps(run_info, indent=2, sort_keys=True, default=str))

    runs_version = delta_io.append_once(runs_row(spark, run_info), delta_io.table_path(lake, "runs"),
                                        *runs_txn(run_id))
    return StageRecord(
        stage=STAGE.name,
        read={"gold_features": gold_version},
        wrote={"runs": runs_version},
        counts={**counts, "test_roc_auc": test_metrics["roc_auc"], "test_pr_auc": test_metrics["pr_auc"],
                **({"oracle_auc": oracle_auc} if oracle_auc is not None else {})},
        extra={**{k: run_info[k] for k in ("run_id", "implementation", "threshold", "oracle_auc", "model_path")},
               "test": test_metrics, "run_json": str(Path(run_dir) / "run.json"),
               # what the next stage (score) takes from this one
               "outputs": {"model": run_info["model_path"], "run_id": run_id}},
    )


def _describe(record: StageRecord) -> str:
    c = record.counts
    return (", ".join(f"{k} {c[k]:,}" for k in ("train", "validation", "test")) + ", "
            + ", ".join(f"{k} {v:.4f}" for k, v in c.items() if isinstance(v, float)))


STAGE = Stage("train", "gold features -> logistic regression model, metrics and run metadata", run, PARAMS,
              reads=("gold_features",), writes=("runs",), describe=_describe)


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str):
    t0 = time.time()
    try:
        yield
    finally:
        timings[name] = round(time.time() - t0, 3)


def split_counts(split: DataFrame) -> tuple[dict[str, int], str]:
    """Customers per part, and a fingerprint of who is in gold with which label (an order-free checksum of the
    customer ids and labels), from one aggregation: a rerun on gold rebuilt from the same silver is the same run
    whatever gold's version. The features are left out: their last bits depend on summation order, which differs
    between engines and partitionings, and the same customers and labels must name the same run on any of them."""
    rows = (split.groupBy("split")
            .agg(F.count(F.lit(1)).alias("n"),
                 F.sum(F.xxhash64(contract.ID, contract.LABEL).cast("decimal(38,0)")).alias("h"))
            .collect())  # three rows
    counts = {r["split"]: r["n"] for r in rows}
    if not counts.get("train") or not counts.get("validation") or not counts.get("test"):
        raise UserError(f"gold has too few customers to split into train/validation/test ({counts}): "
                        f"generate more customers")
    digest = hashlib.sha256(json.dumps(sorted((r["split"], r["n"], str(r["h"])) for r in rows)).encode())
    return counts, digest.hexdigest()[:12]


def validated(grid: list[dict], fitted: list, validation: DataFrame, max_iter: int) -> list[dict]:
    """Every model's validation AUC, from one scan of the validation rows, with its solver's iterations and whether
    they reached ``max_iter`` (the fit stopped there, not at ``tol``)."""
    probabilities = [f"p{i}" for i in range(len(fitted))]
    areas = evaluate.ranking_areas_of(
        validation.select(F.col(contract.LABEL), *[m.probability().alias(c) for m, c in zip(fitted, probabilities)]),
        probabilities, contract.LABEL)
    candidates = []
    for overrides, model, (auc, _) in zip(grid, fitted, areas):
        iterations = model.iterations
        reached = None if iterations is None else iterations >= max_iter
        candidates.append({**overrides, "validation_roc_auc": auc, "iterations": iterations,
                           "max_iter_reached": reached, "model": model})
        solver = "" if iterations is None else f" ({iterations} iterations{', max_iter reached' if reached else ''})"
        print(f"train: regParam={overrides['regParam']} elasticNetParam={overrides['elasticNetParam']} "
              f"validation AUC={auc:.4f}{solver}")
    return candidates


def evaluated(model, split: DataFrame) -> tuple[float, float, dict]:
    """The F1-best threshold on validation, its F1 there, and every test metric at it: the two parts' labels and
    probabilities (three columns) kept for ``evaluate.tuned_metrics``'s three scans of them as the profile says
    (``rescanned``: cached, or computed again from gold per scan)."""
    parts = (split.where(F.col("split").isin("validation", "test"))
             .select("split", F.col(contract.LABEL).alias(evaluate.LABEL), model.probability().alias(evaluate.PROBABILITY)))
    with rescanned(parts) as parts:
        return evaluate.tuned_metrics(parts, "split", "validation", "test")


def choose(candidates: list[dict]) -> dict:
    """The most regularised candidate (largest regParam, then elasticNetParam) whose validation AUC is within
    ``SELECTION_AUC_TOLERANCE`` of the best one's."""
    top = max(c["validation_roc_auc"] for c in candidates)
    near = [c for c in candidates if c["validation_roc_auc"] >= top - SELECTION_AUC_TOLERANCE]
    return max(near, key=lambda c: (c["regParam"], c["elasticNetParam"]))


def estimators_for(spark: SparkSession, reg_params: tuple[float, ...], elastic_net: tuple[float, ...],
                   max_iter: int, tol: float) -> dict[tuple[float, float], estimators.LogisticRegressionTrainer]:
    """One estimator per (regParam, elasticNetParam), for whichever back end the profile names."""
    trainers = {(r, e): estimators.logistic_regression(spark, contract.FEATURES, regParam=r, elasticNetParam=e,
                                                        maxIter=max_iter, tol=tol, standardization=True,
                                                        fitIntercept=True, labelCol=contract.LABEL)
                for r in reg_params for e in elastic_net}
    if not trainers:
        raise UserError("empty parameter grid: give at least one --reg-params and one --elastic-net value")
    return trainers


def extract(spark: SparkSession, lake: str) -> tuple[DataFrame, int]:
    path = delta_io.table_path(lake, "gold_features")
    gold, version = delta_io.read(spark, path)
    missing = [c for c in (contract.ID, contract.LABEL, *contract.FEATURES) if c not in gold.columns]
    if missing:
        raise UserError(f"gold table {path} lacks columns {', '.join(missing)}: rebuild it with the features stage")
    return gold, version


def default_run_id(fingerprint: str, params: dict) -> str:
    """Same gold customers and labels (``split_counts``) and parameters -> same run id (so a rerun replaces, never
    duplicates, whatever gold's version: rebuilding gold from the same silver makes a new version of the same
    rows)."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return f"gold-{fingerprint}-{digest}"


def check_run_id_reuse(models_dir: str, run_id: str, fingerprint: str, params: dict) -> None:
    """A run id names one (gold contents, parameters): rerunning it redoes the same run, anything else is refused,
    since its runs row would be kept (append_once) while its model was replaced."""
    previous = Path(models_dir) / run_id / "run.json"
    if not previous.is_file():
        return
    info = json.loads(previous.read_text())
    before = {k: v for k, v in info["params"].items() if k != "chosen"}
    if before != params or info["gold"].get("fingerprint") != fingerprint:
        raise UserError(f"run id {run_id!r} already names a run with other parameters or gold contents ({previous}): "
                        f"pass a new --run-id, or leave it out to derive one from gold's contents and the parameters")


def runs_txn(run_id: str) -> tuple[str, int]:
    """(txnAppId, txnVersion) for the runs-table append of ``run_id``.

    Delta skips an append whose txnVersion is <= the last one committed for the same app id, so versions
    hashed from run ids under one shared app id would silently drop any later run whose hash is smaller.
    Hence one app id per run ("train:<run_id>") with a fixed version: a re-run of the same run_id is skipped,
    every other run is appended."""
    return f"{RUNS_APP_ID}:{run_id}", 0


def runs_row(spark: SparkSession, info: dict) -> DataFrame:
    """The run's row of the runs table, as literals over a one-row range: planned and written in the JVM alone, one
    task. A frame made from Python rows is a Python RDD, split over every core (a job of 16 tasks on a 16-core
    executor for one row), and the RAPIDS Accelerator cannot plan its scan (the plan's only fallback in train)."""
    test = info["metrics"]["test"]
    oracle = info["oracle_auc"]
    columns = (
        ("run_id", info["run_id"], "string"),
        ("implementation", info["implementation"], "string"),
        ("gold_version", int(info["gold"]["version"]), "long"),
        ("test_roc_auc", float(test["roc_auc"]), "double"),
        ("test_pr_auc", float(test["pr_auc"]), "double"),
        ("test_log_loss", float(test["log_loss"]), "double"),
        ("threshold", float(info["threshold"]), "double"),
        ("oracle_auc", None if oracle is None else float(oracle), "double"),
        ("model_path", info["model_path"], "string"),
        ("run_json", json.dumps({k: v for k, v in info.items() if k != "coefficients"}, sort_keys=True, default=str),
         "string"),
        ("coefficients_json", json.dumps(info["coefficients"], sort_keys=True), "string"),
    )
    return (spark.range(0, 1, 1, numPartitions=1)
            .select(*[F.lit(value).cast(kind).alias(name) for name, value, kind in columns],
                    F.current_timestamp().alias("trained_at")))


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

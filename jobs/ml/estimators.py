"""The estimator factory: the only module that knows two logistic-regression back ends exist.

The Spark property ``spark.churn.ml.implementation`` (set by the conf/ profile) picks one:
- ``pyspark.ml`` (default): Spark MLlib on the CPU; its input is one vector column (VectorAssembler);
- ``spark_rapids_ml``: spark-rapids-ml on GPUs (cuML); it takes the numeric columns directly through
  ``featuresCols``, which keeps the CPU-only VectorAssembler out of a RAPIDS plan.

Callers get a ``LogisticRegressionTrainer`` (estimator + its input preparation + the pre-fit checks) and a
``FittedLogisticRegression`` back, and never branch on the back end. Every model leaves this module as a
plain pyspark.ml ``PipelineModel`` (VectorAssembler + LogisticRegressionModel): a spark-rapids-ml model is
converted with ``model.cpu()`` first, so any CPU Spark can load what was saved, whichever back end trained it.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.core.errors import UserError
from jobs.lake.session import conf_flag, hadoop_fs, registered_executors, release, session_conf, together

IMPLEMENTATION_KEY = "spark.churn.ml.implementation"
FALLBACK_KEY = "spark.rapids.ml.cpu.fallback.enabled"
# spark-rapids-ml casts the features to float32 for cuML unless told otherwise (``float32_inputs``); "false" keeps
# them double, as MLlib fits them. In float32, 5 of 44 coefficients differed from MLlib's by more than
# 1e-3 relative (two float32 fits of the same data as much from each other), at equal AUC.
FLOAT32_INPUTS_KEY = "spark.churn.ml.float32Inputs"
PYSPARK_ML = "pyspark.ml"
SPARK_RAPIDS_ML = "spark_rapids_ml"
IMPLEMENTATIONS = (PYSPARK_ML, SPARK_RAPIDS_ML)

# Whether spark-rapids-ml on one GPU gets its training rows as one partition of gold's file scan: it repartitions any
# other input to one partition per GPU, a shuffle of every training row that its fit's one task then reads (1.9 of
# that task's 13.8 s at 6M customers on an H200, docs/gpu-figures.md). The gpu profile sets it (conf/gpu.conf); with
# several GPUs, or under MLlib, it changes nothing.
ONE_PARTITION_KEY = "spark.churn.ml.fitInputOnePartition"
# File scans planned as one partition each: no cap on a partition's bytes, no cost per file, no minimum count.
ONE_PARTITION_READS = {"spark.sql.files.maxPartitionBytes": str(1 << 62), "spark.sql.files.openCostInBytes": "0",
                       "spark.sql.files.minPartitionNum": "1"}

# The vector column MLlib fits on and the saved pipeline assembles; never a gold column.
VECTOR_COL = "features"

# Estimator parameters both back ends take, mapped by spark-rapids-ml onto cuML's (regParam -> C = 1/regParam,
# elasticNetParam -> l1_ratio, maxIter -> max_iter, ...).
COMMON_PARAMS = ("regParam", "elasticNetParam", "maxIter", "tol", "standardization", "fitIntercept",
                 "labelCol", "predictionCol", "probabilityCol", "rawPredictionCol")
# MLlib parameters that spark-rapids-ml accepts only by training on the CPU (its fallback), never on the GPU.
GPU_UNSUPPORTED_PARAMS = ("threshold", "thresholds", "weightCol", "lowerBoundsOnCoefficients",
                          "upperBoundsOnCoefficients", "lowerBoundsOnIntercepts", "upperBoundsOnIntercepts")


def implementation(spark: SparkSession) -> str:
    value = spark.conf.get(IMPLEMENTATION_KEY, PYSPARK_ML)
    if value not in IMPLEMENTATIONS:
        raise UserError(
            f"{IMPLEMENTATION_KEY}={value!r} is not a known ML back end: set it to one of "
            f"{', '.join(IMPLEMENTATIONS)} in the profile (conf/*.conf)"
        )
    return value


def cpu_fallback_enabled(spark: SparkSession) -> bool:
    return conf_flag(spark, FALLBACK_KEY, False)


@dataclass
class LogisticRegressionTrainer:
    """An estimator over named double feature columns, with whatever input preparation its back end needs."""

    implementation: str
    estimator: Any
    feature_cols: tuple[str, ...]
    prepare: Callable[[DataFrame], DataFrame]
    check_can_fit: Callable[..., None]  # (wait=True): raises UserError if it cannot fit; wait=False only starts it
    params: dict[str, Any] = field(default_factory=dict)

    def fit(self, df: DataFrame) -> "FittedLogisticRegression":
        """Fit on ``df`` (feature columns + label). Stops with a UserError, before any work, if it cannot."""
        self.check_can_fit()
        model = self.estimator.fit(self.prepare(df))
        return FittedLogisticRegression.from_model(model, self.feature_cols, self.implementation)

    def param_maps(self, grid: Sequence[dict[str, Any]]) -> list[dict]:
        """``grid`` (MLlib parameter names -> values) as ParamMaps of this estimator."""
        return [{self.estimator.getParam(name): value for name, value in overrides.items()} for overrides in grid]

    def fit_grid(self, df: DataFrame, grid: Sequence[dict[str, Any]]) -> list["FittedLogisticRegression"]:
        """One model per entry of ``grid`` (parameter overrides, MLlib names), in the grid's order. spark-rapids-ml
        fits them all through the standard ``Estimator.fitMultiple`` from one hand-off of the data to the GPU (the
        hand-off is most of a GPU fit's time). MLlib's ``fitMultiple`` fits them one after the other, and each of
        its L-BFGS iterations is a Spark job of a few milliseconds of work per task, so the fits run side by side
        instead (``together``: each its own thread and jobs); every fit is the same as alone."""
        self.check_can_fit()
        prepared = self.prepare(df)
        if self.implementation == PYSPARK_ML:
            maps = self.param_maps(grid)
            # Each MLlib fit passes over its input twice before its iterations (the features' summary, then its
            # own cache of standardised blocks): the input computed once for every fit, not twice per fit.
            shared = prepared.localCheckpoint(eager=True) if len(maps) > 1 else prepared
            try:
                fitted = together({str(i): (lambda m=m: self.estimator.fit(shared, m)) for i, m in enumerate(maps)})
            finally:
                if shared is not prepared:   # ours to free; never a frame the caller passed in
                    release(shared)
            return [FittedLogisticRegression.from_model(fitted[str(i)], self.feature_cols, self.implementation)
                    for i in range(len(maps))]
        models: list[Any] = [None] * len(grid)
        spark = prepared.sparkSession
        one = conf_flag(spark, ONE_PARTITION_KEY, False) and self.estimator.num_workers == 1
        with session_conf(spark, ONE_PARTITION_READS if one else {}):   # spark-rapids-ml plans its input in the fit
            for index, model in self.estimator.fitMultiple(prepared, self.param_maps(grid)):
                models[index] = FittedLogisticRegression.from_model(model, self.feature_cols, self.implementation)
        return models


def logistic_regression(spark: SparkSession, feature_cols: Sequence[str], **params: Any) -> LogisticRegressionTrainer:
    """A logistic regression for the back end the session's profile names, with ``params`` (MLlib names)."""
    impl = implementation(spark)
    feature_cols = tuple(feature_cols)
    if impl == SPARK_RAPIDS_ML:
        return _rapids_trainer(spark, feature_cols, params)
    return _mllib_trainer(feature_cols, params)


def _mllib_trainer(feature_cols: tuple[str, ...], params: dict[str, Any]) -> LogisticRegressionTrainer:
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler

    assembler = VectorAssembler(inputCols=list(feature_cols), outputCol=VECTOR_COL, handleInvalid="error")
    estimator = LogisticRegression(featuresCol=VECTOR_COL, family="binomial", **params)
    return LogisticRegressionTrainer(PYSPARK_ML, estimator, feature_cols, assembler.transform,
                                     lambda wait=True: None, dict(params))


def _rapids_trainer(spark: SparkSession, feature_cols: tuple[str, ...], params: dict[str, Any]) -> LogisticRegressionTrainer:
    unsupported = sorted(p for p in params if p in GPU_UNSUPPORTED_PARAMS)
    if unsupported and not cpu_fallback_enabled(spark):
        raise UserError(
            f"LogisticRegression parameter {', '.join(unsupported)} is not supported by spark-rapids-ml on the GPU: "
            f"drop it, or set {FALLBACK_KEY}=true in the profile (that trains on the CPU instead)"
        )
    from spark_rapids_ml.classification import LogisticRegression

    params = {"float32_inputs": conf_flag(spark, FLOAT32_INPUTS_KEY, True), **params}
    estimator = LogisticRegression(featuresCols=list(feature_cols), **params)
    return LogisticRegressionTrainer(SPARK_RAPIDS_ML, estimator, feature_cols, lambda df: df,
                                     lambda wait=True: check_gpu_available(spark, wait), dict(params))


# The modules a spark-rapids-ml LogisticRegression fit loads in its Python worker, in the order it loads them:
# the last four when its CumlContext starts (ucxx first, as spark-rapids-ml does, so that UCX's libraries come from
# ucxx). On an H200 the fit's cuML context took 2.5-2.6 s in a worker's first fit, 1.0 s in its later ones; part of
# that difference is these imports (UCX's and NCCL's libraries), which the probe pays before the train stage.
GPU_FIT_MODULES = ("cupy", "cupyx", "spark_rapids_ml.classification", "spark_rapids_ml.common.cuml_context",
                   "cuml.linear_model.logistic_regression_mg", "ucxx", "pylibraft.common", "raft_dask.common",
                   "raft_dask.common.nccl")
_gpu_checks: dict[str, Future] = {}  # application id -> its one probe (running or done)
_gpu_checks_lock = threading.Lock()


def start_checks(spark: SparkSession, again: bool = False) -> None:
    """Starts the profile's back-end check in the background, so that it overlaps other work: for
    spark-rapids-ml the GPU probe, whose Python worker the fit then reuses if the fit starts within Spark's
    idle-worker timeout (one minute without Python tasks). The check's verdict comes at the fit. ``again``: one more
    probe once the last has passed (the pipeline probes as clean starts, so that the imports are paid on a GPU-bound
    stage, and again as features starts, to keep that worker warm for the fit or, after a clean of more than a
    minute, to warm one again).

    No warm-up fit: one of 4,096 rows through the profile's estimator after the probe cut the
    grid's fit from 11.2-13.7 to 9.8-10.1 s, but a spark-rapids-ml fit runs as a barrier task holding all of the
    executor's cores and its GPU (stage-level scheduling), so for its 6.6-9.3 s nothing else ran: the train
    stage's split count waited for it, and by the event log's times the stage would have ended 1-3 s sooner
    without it (measured on an H200)."""
    if implementation(spark) == SPARK_RAPIDS_ML:
        check_gpu_available(spark, wait=False, again=again)


def check_gpu_available(spark: SparkSession, wait: bool = True, again: bool = False) -> None:
    """Stop with one clear message unless a Spark task can import what a spark-rapids-ml fit imports and use a
    CUDA device. A probe per application (and per ``again``), in a background thread; ``wait=False`` only starts it.

    Probed in a task, not on the driver: spark-rapids-ml fits on the executors, and a cluster's driver need not
    have a GPU. The probe is a ``mapInPandas`` over one row per executor (``_probe_tasks``), the same kind of Python
    task the fit runs (under the RAPIDS Accelerator both go through its columnar Python runner), so the Python
    worker it leaves behind, with those modules imported and a CUDA context on the task's GPU, is the one the fit
    reuses (``spark.python.worker.reuse``): on an H200 the grid's fit fell from 23.6 s to 11.5 s, its wait for data
    from ~14.7 s to ~3 s. Skipped when CPU fallback is on (then nothing needs
    the GPU). ``again``: a new probe if the last one has passed (never while one runs, nor after one failed)."""
    if cpu_fallback_enabled(spark):
        return
    app = spark.sparkContext.applicationId
    with _gpu_checks_lock:
        last = _gpu_checks.get(app)
        if last is None or (again and last.done() and last.exception() is None):
            pool = ThreadPoolExecutor(1, thread_name_prefix="gpu-probe")
            _gpu_checks[app] = pool.submit(_probe_with_driver_import, spark)
            pool.shutdown(wait=False)  # the probe runs on; its thread ends with it
        check = _gpu_checks[app]
    if wait:
        check.result()  # raises the probe's UserError


def _probe_with_driver_import(spark: SparkSession) -> None:
    _import_driver_side()   # at once where ``start_driver_import`` has done it
    _probe_gpu(spark)


def _import_driver_side() -> None:
    try:  # the driver's side of a fit, imported before the fit (~1 s, more where cuML is installed)
        import spark_rapids_ml.classification  # noqa: F401
    except ImportError:
        pass  # the estimator's own import reports it, where it is needed


FIRST_JOB_WAIT_S = 60.0


def start_driver_import(spark: SparkSession) -> None:
    """For spark-rapids-ml (and a GPU to fit on), imports the driver's side of a fit on a thread of its own from the
    next Spark job on (the pipeline calls it as ingest starts), so that the probe (``start_checks``, as clean starts)
    finds it imported. An import holds Python's interpreter lock in long stretches, and a stage's thread building its
    DataFrames makes hundreds of calls into the JVM, each waiting for the lock on its return: beside the import,
    clean's customers frame took 0.81-0.83 s to build against 0.21-0.31 s alone (20k customers, 2 cores, without
    cuML, whose modules make the import longer). While a Spark job runs, the driver's threads wait on it instead."""
    if implementation(spark) != SPARK_RAPIDS_ML or cpu_fallback_enabled(spark):
        return
    tracker = spark.sparkContext.statusTracker()

    def run() -> None:
        deadline = time.monotonic() + FIRST_JOB_WAIT_S
        while not tracker.getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.1)
        _import_driver_side()

    threading.Thread(target=run, name="spark-rapids-ml-import", daemon=True).start()


def _probe_gpu(spark: SparkSession) -> None:
    def probe(batches):  # nested so that it is pickled by value: executors need not import jobs.ml.estimators for it
        import importlib
        import json
        import time

        import pandas as pd
        for _ in batches:
            pass
        seconds: dict[str, float] = {}

        def answer(problem: str) -> "pd.DataFrame":
            return pd.DataFrame({"problem": [problem], "seconds": [json.dumps(seconds)]})

        def why(e: Exception) -> str:
            return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

        for name in GPU_FIT_MODULES:
            t0 = time.time()
            try:
                importlib.import_module(name)
            except Exception as e:  # ImportError, or a CUDA library that fails to load
                yield answer(f"cannot import {name} ({why(e)})")
                return
            seconds[name] = round(time.time() - t0, 3)
        t0 = time.time()
        try:
            import cupy
            from pyspark import TaskContext
            gpus = (TaskContext.get().resources() or {}).get("gpu")
            device = int(gpus.addresses[0]) if gpus and gpus.addresses else 0
            cupy.cuda.Device(device).use()
            cupy.zeros(1).sum().item()  # creates the CUDA context the fit would otherwise create
        except Exception as e:
            yield answer(f"no usable CUDA device ({why(e)})")
            return
        seconds["cuda_context"] = round(time.time() - t0, 3)
        yield answer("")

    tasks = _probe_tasks(spark)
    try:
        probed = spark.range(tasks, numPartitions=tasks).mapInPandas(probe, "problem string, seconds string")
        rows = probed.collect()  # one row per probe task
        problem = next((r["problem"] for r in rows if r["problem"]), "")
        seconds = "; ".join(r["seconds"] for r in rows)
    except Exception as e:  # the task itself could not run (e.g. it asks for a GPU resource no executor has)
        problem, seconds = f"a probe task failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", ""
    if problem:
        raise UserError(
            f"{IMPLEMENTATION_KEY}={SPARK_RAPIDS_ML} needs a GPU with cupy and cuML on the executors, but {problem}: "
            f"run under a GPU host (see shared/gpu/README.md) or use the cpu profile "
            f"({IMPLEMENTATION_KEY}={PYSPARK_ML})"
        )
    print(f"train: GPU probe passed; seconds in its Python worker: {seconds}", flush=True)


def _probe_tasks(spark: SparkSession) -> int:
    """One probe task per executor registered now (1 in local mode, or before any executor registered): a fit
    runs one task per GPU, and each should find a warm Python worker on its executor. Placement is Spark's:
    tasks of one stage offered to idle executors go round-robin over them, so with every executor idle, as
    between two stages, each gets one; a busy executor can still take two, and the fit then finds one cold
    worker, as with a single probe."""
    return max(1, registered_executors(spark))  # local mode (0): the driver runs the one probe task


@dataclass
class FittedLogisticRegression:
    """A binary logistic regression as coefficients by feature name plus intercept, whichever back end fit it.

    ``probability`` is a built-in Spark expression (the GPU can run it; MLlib's ``transform`` is a JVM UDF
    over vectors that cannot), so evaluation and scoring need no vector column and no back end."""

    feature_cols: tuple[str, ...]
    coefficients: tuple[float, ...]
    intercept: float
    implementation: str
    spark_model: Any  # pyspark.ml.classification.LogisticRegressionModel (plain, CPU-loadable)
    iterations: int | None = None  # the solver's iterations in the fit (None: a model loaded, not fitted here)

    @classmethod
    def from_model(cls, model: Any, feature_cols: Sequence[str], impl: str) -> "FittedLogisticRegression":
        plain = model.cpu() if hasattr(model, "cpu") else model
        plain.setFeaturesCol(VECTOR_COL)
        return cls(tuple(feature_cols), tuple(float(c) for c in plain.coefficients), float(plain.intercept),
                   impl, plain, solver_iterations(model))

    def margin(self) -> Column:
        terms = [F.col(c) * F.lit(w) for c, w in zip(self.feature_cols, self.coefficients)]
        return balanced_sum([F.lit(self.intercept), *terms])

    def probability(self) -> Column:
        """P(label = 1) as a double column, the same number MLlib's ``probability[1]`` holds."""
        return F.lit(1.0) / (F.lit(1.0) + F.exp(-self.margin()))

    def coefficients_by_name(self) -> dict[str, float]:
        return dict(zip(self.feature_cols, self.coefficients))

    def save(self, path: str) -> str:
        """A plain pyspark.ml PipelineModel (VectorAssembler over the named columns + the model) at ``path``."""
        from pyspark.ml import PipelineModel
        from pyspark.ml.feature import VectorAssembler

        assembler = VectorAssembler(inputCols=list(self.feature_cols), outputCol=VECTOR_COL, handleInvalid="error")
        PipelineModel(stages=[assembler, self.spark_model]).write().overwrite().save(path)
        return path


def solver_iterations(model: Any) -> int | None:
    """Iterations the fit's solver ran: cuML's quasi-Newton (spark-rapids-ml's ``num_iters``) or MLlib's L-BFGS
    (its training summary's ``totalIterations``); None for a model without either (loaded from disk)."""
    iterations = getattr(model, "num_iters", None)
    if iterations is None and getattr(model, "hasSummary", False):
        iterations = model.summary.totalIterations
    return None if iterations is None else int(iterations)


def balanced_sum(terms: Sequence[Column]) -> Column:
    """The sum of ``terms`` as a balanced tree of additions (depth ~log2(n)), not a left-deep chain.

    The RAPIDS Accelerator 25.04 takes time exponential in the depth of nested arithmetic to plan an
    expression (NVIDIA/spark-rapids#13224, fixed in 25.08): a chain of 44 additions never finishes planning,
    so the driver sits at 100% CPU with no Spark job. Pairs are added level by level, left to right: the
    order of the additions is fixed by the order of the terms, so every run gives the same bits."""
    level = list(terms)
    if not level:
        return F.lit(0.0)
    while len(level) > 1:
        paired = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def load_model(spark: SparkSession, path: str) -> FittedLogisticRegression:
    """A model saved by ``FittedLogisticRegression.save``; plain pyspark.ml, so it loads on any CPU Spark."""
    from pyspark.ml import PipelineModel
    from pyspark.ml.util import JavaMLReader

    if not model_exists(spark, path):
        raise UserError(f"no saved model at {path}: run the train stage first, or pass the path it printed "
                        f"(<models-dir>/<run_id>/model)")
    # Every stage is the JVM's (``save``), so the JVM's reader loads it; ``PipelineModel.load`` would first read the
    # metadata's one line in a Python task, starting a Python worker for it (~0.8 s of score at 1M on 2 cores).
    pipeline = JavaMLReader(PipelineModel).load(path)
    assembler, model = pipeline.stages
    return FittedLogisticRegression(tuple(assembler.getInputCols()), tuple(float(c) for c in model.coefficients),
                                    float(model.intercept), PYSPARK_ML, model)


def model_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` (local or any Hadoop file system) holds a saved pyspark.ml model."""
    _, metadata, fs = hadoop_fs(spark, path.rstrip("/") + "/metadata")
    return bool(fs.exists(metadata))

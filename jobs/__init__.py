"""Churn pipeline: Spark stages (generate, ingest, clean, features, train, score, report) over Delta tables.

Layers, each importing only those below it:
    jobs.launch   scripts/submit and scripts/pipeline: profiles (conf/), jars, spark-submit
    jobs.run      the runner (arguments, session, timing, records, errors) and the pipeline (the stages in order)
    jobs.stages   one module per stage; none imports another
    jobs.ml       the estimator factory (MLlib or spark-rapids-ml), metrics, the split
    jobs.lake     the data contract, all Delta I/O, the session helpers, the GPU plan collector
    jobs.core     the Stage and Param declarations, user errors
Engine settings (CPU or GPU, master, memory) never live here: they come from the profiles under conf/.
"""

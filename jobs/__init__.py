"""Churn pipeline: Spark jobs (generate, ingest, clean, features, train, score, report) over Delta tables.

Every stage is a module with ``main(argv)``; ``jobs.cli`` dispatches to them. Engine settings (CPU or GPU,
master, memory) never live here: they come from the profiles under conf/ through scripts/submit.
"""

"""Running stages: the runner, the pipeline (the stages in order), figures from Spark's event log."""

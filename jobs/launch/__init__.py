"""Launching jobs: profiles (conf/), jars, the spark-submit command (scripts/submit, scripts/pipeline)."""

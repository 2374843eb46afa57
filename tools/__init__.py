"""Tooling around the pipeline, not part of it: profile comparison, the GPU fallback gate, the training hand-off
benchmark, a deployment smoke job. The Spark ones are application files: ``scripts/submit tools/<name>.py ...``."""

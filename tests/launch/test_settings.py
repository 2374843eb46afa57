"""Settings checked before Spark starts: an unknown project key is an error naming the nearest one, a misspelt
Spark key a warning naming the likely one."""
from __future__ import annotations

import pytest

from jobs.core.errors import UserError
from jobs.launch import settings


def test_an_unknown_project_setting_is_an_error_naming_the_nearest_known_one():
    with pytest.raises(UserError, match=r"unknown setting spark\.churn\.clean\.materialse: did you mean "
                                        r"spark\.churn\.clean\.materialise\?"):
        settings.check({}, ["spark.churn.clean.materialse=false"])


def test_a_misspelt_spark_setting_is_a_warning_naming_the_likely_one_and_known_ones_pass_quietly(capsys):
    merged = settings.check({"spark.sql.shuffle.partitions": "8"},
                            ["spark.sql.shuffle.partitons=4", "spark.executor.memory=2g",
                             "spark.churn.clean.materialise=false", "spark.hadoop.fs.s3a.endpoint=http://x"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: Spark does not know spark.sql.shuffle.partitons and will ignore it: "
                   "did you mean spark.sql.shuffle.partitions?"]
    assert merged["spark.sql.shuffle.partitons"] == "4" and merged["spark.sql.shuffle.partitions"] == "8"
    assert merged["spark.churn.clean.materialise"] == "false"


def test_every_project_setting_the_code_reads_is_known():
    """A project key the code reads but the check does not know would be refused under --conf."""
    import re
    from pathlib import Path
    root = Path(settings.__file__).resolve().parents[2]
    read = {k for f in (root / "jobs").rglob("*.py") for k in re.findall(r'"(spark\.churn\.[A-Za-z0-9.]+)"', f.read_text())}
    assert read == set(settings.PROJECT_KEYS)
    assert "spark.churn.clean.categoryLookup" in read and "spark.churn.delta.readCommitFiles" in read

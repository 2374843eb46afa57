import pytest


@pytest.fixture
def session_conf(spark):
    """Set Spark SQL settings for one test, restored afterwards."""
    saved = {}

    def set_(**conf):
        for k, v in conf.items():
            saved.setdefault(k, spark.conf.get(k, None))
            spark.conf.set(k, v)
    yield set_
    for k, v in saved.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)

import json

import pytest

from tests.support.model_inputs import synthetic_gold
from tests.support.sessions import build_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One SparkSession for the whole run: cpu profile, local[2], Delta, small shuffles."""
    session = build_session("cpu", str(tmp_path_factory.mktemp("warehouse")))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def trained(spark, tmp_path_factory):
    """Train + score on a synthetic gold table with a known signal (tests/support/model_inputs.py), built once for
    tests/stages/test_train.py, test_score.py, test_check_model.py and tests/ml/test_estimators.py.

    Files run in path order, so tests/stages/test_check_model.py and test_score.py use this run before
    test_train.py re-runs train with the same run id (a re-fit may differ from the first in the last bit of a
    coefficient)."""
    from jobs.lake import delta_io
    from jobs.stages import score, train

    base = tmp_path_factory.mktemp("model")
    lake, models = str(base / "lake"), str(base / "models")
    delta_io.overwrite(synthetic_gold(spark), delta_io.table_path(lake, "gold_features"))
    manifest = base / "manifest.json"
    manifest.write_text(json.dumps({"churn": {"oracle_auc": 0.8}}))
    record = train.STAGE(spark, lake, models, run_id="r1", reg_params=(0.0, 0.01), manifest=str(manifest))
    score_record = score.run(spark, lake, record.extra["model_path"], "r1")
    # The stages' records, as the runner saves them (check-model finds the model and run id in _stages/train.json).
    record.save(lake)
    score_record.save(lake)
    return {"lake": lake, "models": models, "record": record, "score": score_record}

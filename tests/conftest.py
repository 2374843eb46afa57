import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sessions import build_session  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One SparkSession for the whole run: cpu profile, local[2], Delta, small shuffles."""
    session = build_session("cpu", str(tmp_path_factory.mktemp("warehouse")))
    yield session
    session.stop()

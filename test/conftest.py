"""Shared fixtures: paths of the bundled and test models."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ROOT / "config" / "robots"
MODELS = Path(__file__).resolve().parent / "models"
BUNDLED = sorted(ROBOTS.glob("*.xml"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT

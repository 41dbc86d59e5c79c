"""`pip install -e .` after `pip install .` keeps the man page (issue 32).

pip uninstalls the regular install first, man page included, and
setuptools' editable wheel installs the non-editable categories only where
the distribution answers ``has_headers()``/``has_scripts()``/``has_data()``;
distutils calls the last ``has_data_files()``, so the man page was never put
back. setup.py's distribution answers it. Checked here on the distribution
the build makes from setup.py and setup.cfg (no network, no build); the
whole round was checked by hand in a venv with setuptools 84.2.1:
`pip install . && pip install -e .`, then `pip show -f slurmtopo` lists
share/man/man1/slurmtopo.1 and the file is there.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def distribution(monkeypatch):
    from setuptools import distutils  # noqa: F401  (setuptools' own distutils)
    from distutils.core import run_setup

    monkeypatch.chdir(ROOT)
    return run_setup(str(ROOT / "setup.py"), stop_after="config")


def test_the_editable_wheel_is_told_about_the_man_page(distribution):
    assert distribution.data_files == [("share/man/man1", ["docs/man/slurmtopo.1"])]
    # what setuptools' editable_wheel asks for each non-editable category
    for category in ("headers", "scripts", "data"):
        assert callable(getattr(distribution, f"has_{category}", None)), category
    assert distribution.has_data() is True
    assert os.path.isfile(ROOT / "docs" / "man" / "slurmtopo.1")


def test_editable_wheel_still_asks_has_data():
    """The reason for setup.py's distribution: the installed setuptools'
    editable_wheel installs data through ``has_data`` (when a setuptools
    release asks otherwise, this fails and setup.py can go)."""
    import inspect

    from setuptools.command import editable_wheel

    src = inspect.getsource(editable_wheel.editable_wheel)
    assert 'self._run_install("data")' in src
    assert 'getattr(self.distribution, f"has_{category}", None)' in src

"""The build's one customisation (everything else is in setup.cfg).

setuptools' editable wheel (``pip install -e .``, PEP 660) installs the
"non-editable" categories by asking the distribution ``has_headers()``,
``has_scripts()`` and ``has_data()``; distutils names the last one
``has_data_files()``, so the editable wheel carried no data files. pip
replaces a previous ``pip install .`` by uninstalling it first, with the
man page its RECORD lists (share/man/man1/slurmtopo.1, setup.cfg's
data_files), and the editable install then put nothing back: ``man
slurmtopo`` was gone (issue 32). The distribution below answers
``has_data()``, so the editable wheel installs the man page as a regular
install does (tests/test_packaging.py).
"""
from setuptools import setup
from setuptools.dist import Distribution


class _Distribution(Distribution):
    def has_data(self) -> bool:
        """What setuptools' editable_wheel asks (distutils: has_data_files)."""
        return self.has_data_files()


setup(distclass=_Distribution)

"""Builds the sessiond-client distribution from the repository.

The version is the repository's VERSION file. The generated stubs the SDK
imports (sessiond.v1 and google.rpc) are copied from gen/python into the
build, so that the installed package needs no PYTHONPATH and gen/python
stays the one place they are generated to.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
GEN = os.path.join(ROOT, "gen", "python")
# The generated packages shipped with the SDK, as paths under gen/python.
GENERATED = [os.path.join("sessiond"), os.path.join("google", "rpc")]


def version():
    with open(os.path.join(ROOT, "VERSION"), encoding="utf-8") as f:
        return f.read().strip()


class BuildWithStubs(build_py):
    """build_py, plus the generated stubs from gen/python."""

    def run(self):
        super().run()
        for rel in GENERATED:
            src = os.path.join(GEN, rel)
            if not os.path.isdir(src):
                raise SystemExit("setup.py: %s is missing; run scripts/generate.sh" % src)
            dst = os.path.join(self.build_lib, rel)
            shutil.copytree(src, dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(
    version=version(),
    packages=["sessiond_client"],
    package_data={"sessiond_client": ["py.typed"]},
    cmdclass={"build_py": BuildWithStubs},
)

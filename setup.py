"""Build hook: generate the gRPC stubs from protos/ while building the package.

Everything else about the package is in pyproject.toml. An editable install (``make venv``)
writes the stubs into the source tree's git-ignored ``services/_generated``; a wheel gets
them in its build folder, so installed packages ship them.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _protogen():
    # loaded by path: importing the ``services`` package would need its dependencies
    path = HERE / "services" / "protogen.py"
    spec = importlib.util.spec_from_file_location("_imp_protogen", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        protogen = _protogen()
        if getattr(self, "editable_mode", False):
            protogen.generate()
        else:
            protogen.generate(Path(self.build_lib) / "services" / "_generated")


setup(cmdclass={"build_py": BuildPyWithStubs})

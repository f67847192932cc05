"""The build hook of `pip install .` (hatchling, pyproject.toml at the repository root): builds
the binaries with cargo and puts them in the wheel where scripts/build-wheel.sh puts them,
`syncspy/bin/` (syncspy finds libsyncspy.so, libsimcudart.so and syncspy-top next to itself).
The Python files, entry points and metadata come from pyproject.toml.

SYNCSPY_WHEEL_PROFILE=debug builds (or reuses) the debug binaries instead of release ones: CI
packages what its test command already built (scripts/wheel-check.sh).
"""

import os
import shutil
import sys
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CargoBinaries(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return
        if version == "editable":
            raise RuntimeError(
                "syncspy: an editable install (pip install -e) is not supported: the package "
                "carries binaries built by cargo; use `pip install .`"
            )
        sys.path.insert(0, os.path.join(self.root, "python"))
        import build_wheel

        profile = os.environ.get("SYNCSPY_WHEEL_PROFILE", "release")
        if profile not in ("release", "debug"):
            raise RuntimeError("SYNCSPY_WHEEL_PROFILE=%s: release or debug" % profile)
        bin_dir = build_wheel.cargo_build(profile, self.root)
        self._stage = tempfile.mkdtemp(prefix="syncspy-wheel-")
        strip = shutil.which("objcopy") is not None
        build_data["tag"] = build_wheel.stage_binaries(bin_dir, self._stage, strip)
        build_data["pure_python"] = False
        for b in build_wheel.BINARIES:
            build_data["force_include"][os.path.join(self._stage, b)] = "syncspy/bin/" + b

    def finalize(self, version, build_data, artifact_path):
        stage = getattr(self, "_stage", None)
        if stage:
            shutil.rmtree(stage, ignore_errors=True)

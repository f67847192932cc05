"""The ``syncspy`` and ``syncspy-top`` commands of the wheel: each runs the executable of the
same name shipped in the ``syncspy`` package (``syncspy/bin``), where ``syncspy`` also finds
``libsyncspy.so`` (next to its own binary). Kept out of the ``syncspy`` package, whose import
loads the library."""

import os
import sys
from importlib.util import find_spec


def _exec(name):
    spec = find_spec("syncspy")  # finds the package without importing (loading) it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("%s: the syncspy package is not installed" % name)
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", name)
    if not os.access(path, os.X_OK):
        sys.exit(
            "%s: %s is missing or not executable: reinstall the package "
            "(pip install --force-reinstall syncspy)" % (name, path)
        )
    os.execv(path, [name] + sys.argv[1:])


def main():
    _exec("syncspy")


def top():
    _exec("syncspy-top")


if __name__ == "__main__":
    main()

"""Snakemake's logger plugin ``cselab``: the console of cselab's workflow, written by the library
(cselab/pipeline/console.py). Installed beside cselab (README), named by profiles/default.

The file is loaded by its path, under a name of its own: importing the ``cselab`` package here,
before the workflow is read, would make a workflow in another checkout use this one's library.
"""

import importlib.util
import sys
from pathlib import Path


def _console():
    name = "cselab_console_plugin"
    if name not in sys.modules:
        found = importlib.util.find_spec("cselab")
        if found is None or not found.submodule_search_locations:
            raise ImportError("snakemake-logger-plugin-cselab needs cselab installed (see cselab's README)")
        path = Path(list(found.submodule_search_locations)[0]) / "pipeline" / "console.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


LogHandler = _console().LogHandler
LogHandlerSettings = _console().LogHandlerSettings

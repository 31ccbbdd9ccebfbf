"""specq's LMDeploy compatibility hook, on PYTHONPATH only for the LMDeploy servers specq starts
(`specq.pipeline.engines.lmdeploy_compat.launch_env`): installs the import hook of `../hook.py`, loaded by
path so that this start-up code needs nothing but the standard library, and inert unless SPECQ_LMDEPLOY_COMPAT
names a patch. Then it runs the `sitecustomize` this one hides, if the environment has one."""

import importlib.util
import os
import sys


def _install() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "_specq_lmdeploy_compat_hook", os.path.join(os.path.dirname(here), "hook.py")
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install()


def _chain() -> None:
    """Import the next `sitecustomize` on sys.path (the one this file shadows)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_specq_chained_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if os.environ.get("SPECQ_LMDEPLOY_COMPAT"):
    try:
        _install()
    except Exception as e:  # never stop the interpreter from starting
        sys.stderr.write(f"specq: warning: LMDeploy compatibility hook not installed: {e}\n")
_chain()

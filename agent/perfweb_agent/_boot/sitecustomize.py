"""Started by `perf-agent attach` through PYTHONPATH: chain on, then start the agent.

This directory is put first on PYTHONPATH of the command that `perf-agent attach` runs, so
this file is imported by `site` at interpreter start-up, before the script. It imports any
other `sitecustomize` further down the path (so an environment's own one still runs), then
starts the agent from the PERF_AGENT_* environment (without importing torch).
"""

import os
import sys


def _load_package_from_home() -> None:
    """This Python lacks the agent: load the launcher's copy as package `perfweb_agent`, by path.

    Only the package itself is loaded from there (not the rest of the launcher's
    site-packages), so its optional dependencies come from this Python or not at all.
    """
    import importlib.util

    home = os.environ.get("PERF_AGENT_HOME", "")
    init = os.path.join(home, "__init__.py")
    if not home or not os.path.exists(init):
        raise ImportError("the agent package is not importable here")
    spec = importlib.util.spec_from_file_location(
        "perfweb_agent", init, submodule_search_locations=[os.path.dirname(init)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["perfweb_agent"] = module
    spec.loader.exec_module(module)


def _start_agent() -> None:
    try:
        try:
            from perfweb_agent.runtime import autostart as _autostart
        except ImportError:
            _load_package_from_home()
            from perfweb_agent.runtime import autostart as _autostart
        _autostart.start_from_env()
    except Exception as exc:  # noqa: BLE001 - never stop the user's program from starting
        sys.stderr.write(f"[perf-agent] could not start: {exc}\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path
    # a new list, not an in-place edit: another thread iterating sys.path must not skip entries
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    except Exception as exc:  # noqa: BLE001 - their sitecustomize failed; site would warn too
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback: {exc}\n")
    finally:
        sys.path = saved


_chain()  # their sitecustomize first, so the agent starts in the environment they set up
_start_agent()

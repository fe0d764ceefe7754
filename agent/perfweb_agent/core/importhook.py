"""Run a callback right after the script imports torch, without importing it ourselves."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from perfweb_agent.core.logger import say_once


class _AfterImport(importlib.abc.MetaPathFinder):
    """A meta-path finder that wraps one module's loader to call back after exec."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback
        self._busy = False

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module
        finder, callback = self, self.callback

        def exec_module(module: ModuleType) -> None:
            original(module)
            finder.remove()
            try:
                callback(module)
            except Exception as exc:  # noqa: BLE001
                say_once("import-hook", "agent could not hook %s: %s", fullname, exc)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> Callable[[], None]:
    """Call `callback(module)` once `name` is imported (now, if it already is).

    Returns a function that cancels the hook.
    """
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if module is not None and not getattr(spec, "_initializing", False):
        callback(module)
        return lambda: None
    finder = _AfterImport(name, callback)
    sys.meta_path.insert(0, finder)
    return finder.remove

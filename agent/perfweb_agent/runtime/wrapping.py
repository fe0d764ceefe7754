"""Wrapping a function of torch in place, once: the one helper the agent's patches share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def wrap_once(
    owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]], *, mark: str
) -> None:
    """Replace `owner.name` by `make(original)`, unless it is missing or already carries
    `mark`. Each patch set has its own mark: `functools.update_wrapper` copies the original's
    attributes, so a wrapper of another set's wrapper carries that set's mark too."""
    original = getattr(owner, name, None)
    if original is None or getattr(original, mark, False):
        return
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, mark, True)
    setattr(owner, name, wrapper)

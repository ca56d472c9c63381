"""One registry implementation for every plug-in family (orchestrators, judges, backends, ...).

Config selects a component by its registered name, or names an out-of-tree ``module:attr``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → factory map with duplicate protection and helpful misses.

    Parameters
    ----------
    kind : str
        What the registry holds, used in error messages (e.g. ``"orchestrator"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name`` (a taken name with another object fails)."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name`` (idempotent for the same object)."""
        if not name or ":" in name:
            raise ValueError(f"invalid {self.kind} name {name!r}: non-empty, no ':'")
        prev = self._items.get(name)
        if prev is not None and prev is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered to {prev!r}")
        self._items[name] = obj

    def get(self, name: str) -> T:
        """Look up ``name``, or import ``module:attr`` for out-of-tree plug-ins."""
        if ":" in name:
            module, _, attr = name.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise ValueError(f"cannot import {self.kind} {name!r}: {e}") from e
            return obj  # type: ignore[no-any-return]
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; available: {sorted(self._items)} "
                "(or give 'module:attr')"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

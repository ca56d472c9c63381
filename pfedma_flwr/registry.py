"""One registry implementation for every plug-in family (orchestrators, judges, backends, ...).

Config selects a component by its registered name, or names an out-of-tree ``module:attr``.
Importing ``module:attr`` runs that module's code, so a ClientApp turns it off while it builds
and runs its agent (:func:`plugin_imports`): a run config must not run code on a node unless the
node's own config allows plug-ins (``pfedma_flwr.client.node_security``).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

# A ContextVar, not a module flag: simulated ClientApps run in threads next to a ServerApp in
# tests, and one node's setting must not leak into another's lookups.
_IMPORTS_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pfedma_plugin_imports", default=True)


class PluginImportRefused(ValueError):
    """A ``module:attr`` plug-in was named where importing code is not allowed."""


@contextlib.contextmanager
def plugin_imports(allowed: bool) -> Iterator[None]:
    """Within the block, ``Registry.get("module:attr")`` imports only if ``allowed``."""
    token = _IMPORTS_ALLOWED.set(bool(allowed))
    try:
        yield
    finally:
        _IMPORTS_ALLOWED.reset(token)


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
        """Look up ``name``, or import ``module:attr`` for out-of-tree plug-ins.

        Raises
        ------
        PluginImportRefused
            For ``module:attr`` (the only form that imports) while :func:`plugin_imports`
            forbids importing.
        """
        if ":" in name and not _IMPORTS_ALLOWED.get():
            raise PluginImportRefused(
                f"{self.kind} {name!r} is not a registered name and importing plug-in code is "
                f"not allowed here (available: {sorted(self._items)}); on a SuperNode, set "
                "allow-plugins=true in its node config to load out-of-tree code")
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

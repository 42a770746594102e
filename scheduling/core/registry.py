"""Policies by name: ``@register_policy("fifo")`` on a class, ``get_policy("fifo")``.

The registry maps names to classes (factories), never to instances, so no state lives
in this module between rounds: every lookup builds a fresh policy from its parameters.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from scheduling.core.placement import PLACERS

_FACTORIES: dict[str, Callable[..., Any]] = {}
_BUILTINS = "scheduling.core.policies"

T = TypeVar("T")


def register_policy(name: str) -> Callable[[T], T]:
    """Class decorator: register a policy class under ``name`` (its ``name`` attribute)."""

    def wrap(cls: T) -> T:
        existing = _FACTORIES.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"policy name {name!r} is already registered to {existing!r}")
        cls.name = name  # type: ignore[attr-defined]
        _FACTORIES[name] = cls  # type: ignore[assignment]
        return cls

    return wrap


def _load_builtins() -> None:
    # Importing the package registers every built-in policy (one module each).
    importlib.import_module(_BUILTINS)


def policy_names() -> tuple[str, ...]:
    _load_builtins()
    return tuple(sorted(_FACTORIES))


def get_policy(name: str, **params: Any) -> Any:
    """A new policy object for ``name``, built with ``params`` (its keyword arguments)."""
    _load_builtins()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(_FACTORIES))}") from None
    policy = factory(**params)
    # Every policy's GPUs are placed by the placer its ``placement`` names (None: it names
    # them itself); an unknown name would fail in the first round, not here.
    placement = getattr(policy, "placement", None)
    if placement is not None and placement not in PLACERS:
        known = ", ".join(sorted(PLACERS))
        raise ValueError(f"placement must be one of {known}, not {placement!r}")
    return policy


def takes(name: str, param: str) -> bool:
    """Whether policy ``name`` takes the keyword ``param`` (its class or a base's
    ``__init__`` names it)."""
    _load_builtins()
    cls = _FACTORIES[name]
    return any(
        param in inspect.signature(c.__init__).parameters
        for c in getattr(cls, "__mro__", (cls,))
        if "__init__" in vars(c)
    )

"""Lazy package exports: a name is imported from its submodule on first use,
so importing a package (or ddlsim itself) pulls in nothing heavy."""

from __future__ import annotations

from importlib import import_module
from typing import Callable, Mapping


def lazy_exports(package: str, home: Mapping[str, str], namespace: dict,
                 submodules: tuple[str, ...] = ()) -> tuple[Callable, Callable]:
    """(``__getattr__``, ``__dir__``) for `package`, whose names live in the submodules `home` maps them to;
    the `submodules` themselves are attributes too (``ddlsim.trace`` without ``import ddlsim.trace``)."""

    def __getattr__(name: str):
        if name in home:
            return getattr(import_module(f"{package}.{home[name]}"), name)
        if name in submodules:
            return import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(home) | set(submodules))

    return __getattr__, __dir__

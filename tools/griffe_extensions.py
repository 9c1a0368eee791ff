"""Griffe extensions for the API reference.

- `ExampleSections`: the docstrings' `Example:` sections are read as Google-style
  `Examples:` sections, so their `>>>` lines render as code (as an admonition, `>>>`
  would be Markdown block quotes and `>>> # comment` a heading).
- `EquinoxModuleInit`: an `equinox.Module` without its own `__init__` is a dataclass: its
  signature is its fields (defaults from `= value` or `eqx.field(default=...)`), so that
  the reference shows it and the strict build can check the docstring's `Args:` against
  it. Griffe does this only for `@dataclasses.dataclass`.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.MULTILINE)
_MODULE_BASES = {"eqx.Module", "equinox.Module"}


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)


def _is_equinox_module(cls: griffe.Class) -> bool:
    if any(str(base) in _MODULE_BASES for base in cls.bases):
        return True
    try:
        parents = cls.resolved_bases
    except (griffe.AliasResolutionError, griffe.CyclicAliasError, ValueError):
        return False
    return any(_is_equinox_module(parent) for parent in parents)


def _has_init(cls: griffe.Class) -> bool:
    try:
        mro = [cls, *cls.mro()]
    except ValueError:
        mro = [cls]
    # An `__init__` this extension made for a parent (line 0) is not the class's own: a
    # subclass with fields of its own needs its own signature.
    return any(
        "__init__" in klass.members and klass.members["__init__"].lineno != 0 for klass in mro
    )


def _field_parameter(attribute: griffe.Attribute) -> griffe.Parameter | None:
    value = attribute.value
    default: str | griffe.Expr | None = value
    if isinstance(value, griffe.ExprCall) and str(value.function) in {"eqx.field", "field"}:
        keywords = {
            arg.name: arg.value for arg in value.arguments if isinstance(arg, griffe.ExprKeyword)
        }
        if str(keywords.get("init", "True")) == "False":
            return None
        default = keywords.get("default")
    return griffe.Parameter(
        attribute.name,
        annotation=attribute.annotation,
        kind=griffe.ParameterKind.positional_or_keyword,
        default=default,
    )


def _fields(cls: griffe.Class) -> list[griffe.Attribute]:
    try:
        parents = [p for p in reversed(cls.mro()) if _is_equinox_module(p)]
    except ValueError:
        parents = []
    fields: dict[str, griffe.Attribute] = {}
    for klass in [*parents, cls]:
        for member in klass.members.values():
            if (
                not member.is_alias
                and member.is_attribute
                and member.annotation is not None
                and "property" not in member.labels
                and not str(member.annotation).startswith(("ClassVar", "AbstractVar"))
            ):
                fields[member.name] = member  # type: ignore[assignment]
    return list(fields.values())


class EquinoxModuleInit(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            if cls.is_alias or not _is_equinox_module(cls) or _has_init(cls):
                continue
            parameters = [p for f in _fields(cls) if (p := _field_parameter(f)) is not None]
            self_parameter = griffe.Parameter(
                "self", kind=griffe.ParameterKind.positional_or_keyword
            )
            cls.set_member(
                "__init__",
                griffe.Function(
                    "__init__",
                    lineno=0,
                    endlineno=0,
                    parent=cls,
                    parameters=griffe.Parameters(self_parameter, *parameters),
                    returns="None",
                ),
            )


def _classes(module: griffe.Module | griffe.Class):
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_class:
            yield member
            yield from _classes(member)  # type: ignore[arg-type]
        elif member.is_module:
            yield from _classes(member)  # type: ignore[arg-type]

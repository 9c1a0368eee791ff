"""A griffe extension for the API reference: the docstrings' `Example:` sections are read
as Google-style `Examples:` sections, so their `>>>` lines render as code (as an
admonition, `>>>` would be Markdown block quotes and `>>> # comment` a heading)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)

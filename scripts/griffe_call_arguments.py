"""Griffe extension: a layer's ``Call arguments:`` section as a table of arguments.

The layers document the arguments of ``call`` as keras-hub's layers do, in a
``Call arguments:`` section after ``Args:``. Google style (griffe's parser)
knows no such section and would render its ``name: description`` lines as one
paragraph; this extension parses them like ``Args:`` entries and shows them as
a table titled "Call arguments" (mkdocs.yml loads it for the API reference).
"""

import re

import griffe

SECTION_TITLE = "Call arguments"
# `name: description`, the first line of one argument (continuations are indented).
_ITEM = re.compile(r"^(\w+(?:\s*/\s*\w+)*):\s*(.*)$")


def call_arguments(text):
    """`[(name, description)]` of a section's text of `name: description` items.

    An item's continuation lines are indented; any other line that does not
    start an item is a `ValueError` naming it (a malformed section would
    otherwise lose text).
    """
    items = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _ITEM.match(line)
        if match and not line[0].isspace():
            items.append([match[1], match[2]])
        elif items and line[0].isspace():
            items[-1][1] += " " + line.strip()
        else:
            raise ValueError(f"{SECTION_TITLE!r} line is not `name: description`: {line!r}")
    return [(name, description) for name, description in items]


class CallArguments(griffe.Extension):
    """Turns each class's ``Call arguments:`` admonition into a parameters table."""

    def on_class(self, *, cls, **kwargs):
        docstring = cls.docstring
        if docstring is None or f"{SECTION_TITLE}:" not in docstring.value:
            return
        sections = []
        for section in docstring.parse():
            if (section.kind is griffe.DocstringSectionKind.admonition
                    and section.title == SECTION_TITLE):
                try:
                    items = call_arguments(section.value.contents)
                except ValueError as error:
                    cls_path = cls.path
                    griffe.logger.warning("%s: %s", cls_path, error)
                    sections.append(section)
                    continue
                section = griffe.DocstringSectionOtherParameters(
                    [griffe.DocstringParameter(name, description=description)
                     for name, description in items],
                    title=f"{SECTION_TITLE}:")
            sections.append(section)
        docstring.__dict__["parsed"] = sections  # what `Docstring.parsed` caches

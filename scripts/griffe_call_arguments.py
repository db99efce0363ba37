"""Griffe extension: a layer's ``Call arguments:`` section as a list of arguments.

The layers document the arguments of ``call`` as keras-hub's layers do, in a
``Call arguments:`` section after ``Args:``. Google style (griffe's parser)
knows no such section and would render its ``name: description`` lines as one
paragraph; this extension parses them like ``Args:`` entries (mkdocs.yml loads
it for the API reference). A layer that takes another's call arguments
unchanged says so in one line, ``as `OtherLayer`.``, and its page shows the
other's entries: the attention protocol's arguments are written once.
"""

import re

import griffe

SECTION_TITLE = "Call arguments"
# `name: description`, the first line of one argument (continuations are indented).
_ITEM = re.compile(r"^(\w+(?:\s*/\s*\w+)*):\s*(.*)$")
# "as `MultiHeadAttention`." or "as `layers.projected_gru.GRU`."
_REFERENCE = re.compile(r"^as `(?:[\w.]+\.)?(\w+)`\.?$")


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


def referenced_class(text):
    """The class name of a one-line ``as `Name`.`` section, or None."""
    match = _REFERENCE.match(text.strip())
    return match[1] if match else None


def _classes(module):
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_class:
            yield member
        elif member.is_module:
            yield from _classes(member)


def _call_arguments_section(cls):
    """`(index, admonition section)` of the class's ``Call arguments:``, or None."""
    if cls.docstring is None or f"{SECTION_TITLE}:" not in cls.docstring.value:
        return None
    for index, section in enumerate(cls.docstring.parsed):
        if (section.kind is griffe.DocstringSectionKind.admonition
                and section.title == SECTION_TITLE):
            return index, section
    return None


class CallArguments(griffe.Extension):
    """Turns each class's ``Call arguments:`` admonition into an arguments section."""

    def on_package(self, *, pkg, **kwargs):
        found = {cls.name: (cls, _call_arguments_section(cls)) for cls in _classes(pkg)}
        items = {}
        for name, (cls, located) in found.items():
            if located is not None and referenced_class(located[1].value.contents) is None:
                try:
                    items[name] = call_arguments(located[1].value.contents)
                except ValueError as error:
                    griffe.logger.warning("%s: %s", cls.path, error)
        for name, (cls, located) in found.items():
            if located is None:
                continue
            index, section = located
            target = referenced_class(section.value.contents)
            entries = items.get(target or name)
            if entries is None:
                if target is not None:
                    griffe.logger.warning("%s: %s names %r, which has no %s of its own",
                                          cls.path, SECTION_TITLE, target, SECTION_TITLE)
                continue
            cls.docstring.parsed[index] = griffe.DocstringSectionOtherParameters(
                [griffe.DocstringParameter(argument, description=description)
                 for argument, description in entries],
                title=f"{SECTION_TITLE}:")

"""The dataset sources ``data=`` accepts: one registry, :data:`SOURCES` (name -> :class:`Source`), that
``load_rows`` dispatches through and that its errors and the docs' table are written from.

A source says how it recognises a spec (``match``), how it loads one (``load``), how a spec of it is
written (``form``) and what it is (``description``). The order of tries is explicit and fixed:

1. sources matched by name (``match="name"``: the spec is the source's name) or by prefix
   (``match="prefix"``: the spec starts with ``prefix``), in registration order;
2. then sources matched by a predicate (``match="predicate"``: local files, folders, Hub ids — they look at
   the file system or at the spec's shape, so a name or a prefix always wins over them), in registration order.

The first that matches loads the spec; none: ValueError listing every form (:func:`spec_forms`). The built-in
sources are registered in ``rlvr/data/sources.py``; docs/design/architecture.md, "Add a dataset source", is
the checklist, and tests/contracts/test_source_contract.py checks every registered source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

MATCHES = ("name", "prefix", "predicate")


class SourceLoader(Protocol):
    """``load(spec, gold=..., environment=..., keep_row=...) -> rows``: the normalized rows of one spec
    (``rlvr.data.rows.normalize_rows``: dicts with a unique ``id``, a non-empty ``prompt`` and ``answer``);
    ``gold``, ``environment``, ``keep_row``: ``load_rows``'s row rules (a source whose rows always carry a gold
    answer may ignore them). ValueError naming the spec and the fix on a bad spec."""

    def __call__(self, spec: str, *, gold: bool = True, environment: bool = False,
                 keep_row: bool = False) -> list[dict]: ...


@dataclass(frozen=True)
class Source:
    """One dataset source.

    Args:
        name: the registry key; with ``match="name"`` also the spec itself.
        load: its :class:`SourceLoader`.
        form: how a spec of it is written, as the unknown-spec error lists it (``"'rg:NAME[:key=value...]'"``).
        description: one line: what its rows are (the docs' table).
        match: ``name`` | ``prefix`` | ``predicate`` (module docstring: the order of tries).
        prefix: with ``match="prefix"``, the text a spec starts with (``"rg:"``).
        predicate: with ``match="predicate"``, ``predicate(spec) -> bool``.
        gold: its rows carry a gold ``answer`` when loaded with ``gold=True`` (the contract suite checks it).
        example: a spec of it that loads offline with nothing else (None: the contract suite makes its data).
    """

    name: str
    load: SourceLoader
    form: str
    description: str
    match: str = "name"
    prefix: str | None = None
    predicate: Callable[[str], bool] | None = None
    gold: bool = True
    example: str | None = None

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise ValueError(f"source {self.name!r}: match={self.match!r}; use one of {', '.join(MATCHES)}")
        if (self.match == "prefix") != bool(self.prefix) or (self.match == "predicate") != callable(self.predicate):
            raise ValueError(f"source {self.name!r}: give prefix= exactly with match='prefix' and predicate= exactly "
                             "with match='predicate'")

    def matches(self, spec: str) -> bool:
        if self.match == "name":
            return spec == self.name
        if self.match == "prefix":
            return spec.startswith(self.prefix)
        return bool(self.predicate(spec))


SOURCES: dict[str, Source] = {}


def register_source(source: Source) -> Source:
    """Add ``source`` to :data:`SOURCES` (ValueError if its name is taken); returns it."""
    if source.name in SOURCES:
        raise ValueError(f"a dataset source named {source.name!r} is registered already; choose another name")
    SOURCES[source.name] = source
    return source


def sources_in_order() -> list[Source]:
    """The registered sources in the order ``load_rows`` tries them: names and prefixes, then predicates."""
    return sorted(SOURCES.values(), key=lambda source: source.match == "predicate")  # (a stable sort)


def find_source(spec: str) -> Source | None:
    """The first source (:func:`sources_in_order`) that matches ``spec``; None when none does."""
    return next((source for source in sources_in_order() if source.matches(spec)), None)


def spec_forms() -> str:
    """Every source's form, in the order of tries: "'a', 'b', ... or a Hub id ..." (the unknown-spec errors)."""
    forms = [source.form for source in sources_in_order()]
    return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])}, or {forms[-1]}"


def source_table() -> str:
    """The markdown table of the sources, in the order of tries (docs/design/architecture.md holds it)."""
    lines = ["| source | matched by | spec | rows |", "|---|---|---|---|"]
    for source in sources_in_order():
        matched = f"prefix `{source.prefix}`" if source.match == "prefix" else source.match
        lines.append(f"| `{source.name}` | {matched} | {source.form} | {source.description} |")
    return "\n".join(lines)

"""Read a ``--config`` YAML file: PyYAML's safe loader, bounded in size, strict about keys, ``${VAR}`` expanded.

Three departures from ``yaml.safe_load`` (which TRL's HfArgumentParser uses), each because a config
file that silently means something else is worse than one refused:

- **Bounded.** The file may hold at most ``MAX_FILE_BYTES``; its values, with every alias (``*name``)
  counted again wherever it is used, at most ``MAX_EXPANDED`` (one per value plus its characters).
  Nine levels of nine aliases ("billion laughs") parse into a small graph that the first copy of the
  config (``--dry-run``'s printout, config.yaml) expands to 9⁹ strings: refused while reading instead.
  A recursive alias (``&a [*a]``) is refused too.
- **Unique keys.** A key given twice in one mapping is an error naming both lines (PyYAML keeps the
  last). A merge (``<<: *base``) may still be overridden by the mapping's own keys.
- **Environment variables.** ``${NAME}`` in a string is replaced by the variable's value, ``${NAME:-text}``
  by its value or ``text`` when it is unset (``text`` may hold balanced braces and variables:
  ``${A:-${B:-x}}``); an unset ``${NAME}`` is an error. ``$${NAME}`` is the
  literal text ``${NAME}``; ``$NAME`` without braces, and ``${...}`` holding something other than a
  name, are left as written (a price, LaTeX). Variables are read from the environment rlvr started in,
  not from the file's own ``env:`` mapping.

A key given both flat and nested in a section is refused by ``rlvr.config.parsing.flatten_yaml``, with
the lines recorded here (``ConfigFile.lines``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 1 << 20  # 1 MiB: a config with long prompts in it is tens of kB
MAX_EXPANDED = 4 << 20  # values + characters after aliases are expanded (a file without aliases: < 2 MiB)
MERGE_TAG = "tag:yaml.org,2002:merge"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # of a variable: ${NAME}, ${NAME:-default}, $${NAME} (literal)


@dataclass(frozen=True)
class ConfigFile:
    """A parsed config file: its document, and the line of each top-level key and each key of a top-level
    mapping (``("run", "max_steps")``), for messages."""

    doc: Any
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the bounds, unique keys and ``${VAR}`` expansion of this module."""

    def __init__(self, text: str, path: str):
        super().__init__(text)
        self.path = path
        self.lines: dict[tuple[str, ...], int] = {}

    def compose_document(self) -> Node:
        node = super().compose_document()
        _check_expanded_size(node, self.path)
        self.lines = _key_lines(node)
        return node

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            _check_unique_keys(node, self.path)
        return super().construct_mapping(node, deep=deep)

    def construct_expanded_str(self, node: ScalarNode) -> str:
        return expand_variables(self.construct_scalar(node), f"{self.path}:{node.start_mark.line + 1}")


ConfigLoader.add_constructor("tag:yaml.org,2002:str", ConfigLoader.construct_expanded_str)


def expand_variables(text: str, where: str) -> str:
    """``text`` with ``${NAME}`` / ``${NAME:-default}`` replaced from the environment (module docstring); a
    default may hold braces and variables of its own (``${A:-${B:-x}}``, as in a shell), expanded only when used."""
    if "${" not in text:
        return text
    out, start = [], 0
    while (at := text.find("${", start)) >= 0:
        escaped = at > start and text[at - 1] == "$"
        name = _NAME.match(text, at + 2)
        end = _reference_end(text, at + 2 + len(name.group(0))) if name else None
        if end is None:  # ${...} holding no name, or never closed: left as written (a price, LaTeX)
            out.append(text[start:at + 2])
            start = at + 2
            continue
        out.append(text[start:at - 1] if escaped else text[start:at])
        if escaped:  # $${...}: the literal text ${...}
            out.append(text[at:end])
        else:
            body = text[at + 2 + len(name.group(0)):end - 1]  # "" or ":-default"
            out.append(_value(name.group(0), body[2:] if body else None, where))
        start = end
    out.append(text[start:])
    return "".join(out)


def _reference_end(text: str, after_name: int) -> int | None:
    """Where ``${NAME}`` / ``${NAME:-default}`` ends (one past its ``}``, braces in the default balanced); None
    when the name is followed by anything else, or the reference never closes."""
    if text.startswith("}", after_name):
        return after_name + 1
    if not text.startswith(":-", after_name):
        return None
    depth = 1
    for index in range(after_name + 2, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    return None


def _value(name: str, default: str | None, where: str) -> str:
    if name in os.environ:
        return os.environ[name]
    if default is not None:
        return expand_variables(default, where)
    raise ValueError(f"{where}: ${{{name}}} is not set in the environment; set {name}, write "
                     f"${{{name}:-default}} for a default, or $${{{name}}} for the literal text")


def read_config_file(path: str) -> ConfigFile:
    """The parsed ``--config`` file; ValueError naming the file (and line) and the fix."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"config file {path!r} does not exist; check the path") from None
    except IsADirectoryError:
        raise ValueError(f"--config {path!r} is a directory; pass a YAML file (e.g. {path}/config.yaml)") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"config file {path!r} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except OSError as error:
        raise ValueError(f"cannot read config file {path!r}: {error.strerror or error}") from None
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        raise ValueError(f"config file {path!r} is over {MAX_FILE_BYTES >> 20} MiB; a config is options, not data: "
                         "put long texts or rows in a data file (data=FILE.jsonl)")
    loader = ConfigLoader(text, path)
    try:
        return ConfigFile(loader.get_single_data(), loader.lines)
    except yaml.MarkedYAMLError as error:
        raise ValueError(_syntax_error_line(path, error)) from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: invalid YAML ({' '.join(str(error).split())}); fix the file") from None
    except RecursionError:
        raise ValueError(f"{path}: the YAML is nested too deeply to read; a config nests a few levels") from None
    finally:
        loader.dispose()


def _syntax_error_line(path: str, error: yaml.MarkedYAMLError) -> str:
    mark, start = error.problem_mark or error.context_mark, error.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
    problem = " ".join(str(error.problem or error.context or "invalid YAML").split())
    if error.context and start is not None and mark is not None and start.line != mark.line:
        problem += f" ({error.context} that starts at line {start.line + 1})"
    return (f"{where}: YAML syntax error: {problem}; fix the file (a value holding ': ', ' #' or brackets needs "
            "quotes)")


def _check_expanded_size(root: Node | None, path: str) -> None:
    """Refuse a document whose values, aliases expanded, exceed MAX_EXPANDED, or that holds a recursive alias.

    Each node is measured once (aliases share their anchor's node), so this costs the file's size, not the
    expansion's."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ValueError(f"{path}:{node.start_mark.line + 1}: an alias refers to the anchor it is inside (a "
                             "recursive structure); a config value cannot contain itself")
        open_nodes.add(key)
        if isinstance(node, ScalarNode):
            total = 1 + len(node.value)
        elif isinstance(node, SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_EXPANDED:
            raise ValueError(f"{path}:{node.start_mark.line + 1}: this value expands, through its aliases (*name), to "
                             f"more than {MAX_EXPANDED} values and characters (a config holds a few thousand): "
                             "write it out, or use fewer nested aliases")
        sizes[key] = total
        return total

    if root is not None:
        size(root)


def _check_unique_keys(node: MappingNode, path: str) -> None:
    """Refuse a key written twice in one mapping (a merge's keys aside), naming both lines."""
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
            continue
        ident, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
        if ident in seen:
            raise ValueError(f"{path}:{line}: {key_node.value} is given twice in the same mapping, at lines "
                             f"{seen[ident]} and {line}; keep one")
        seen[ident] = line


def _key_lines(root: Node | None) -> dict[tuple[str, ...], int]:
    """The line of each top-level key, and of each key of a top-level mapping."""
    lines: dict[tuple[str, ...], int] = {}
    if not isinstance(root, MappingNode):
        return lines
    for key_node, value_node in root.value:
        if not isinstance(key_node, ScalarNode):
            continue
        lines[(key_node.value,)] = key_node.start_mark.line + 1
        if isinstance(value_node, MappingNode):
            for child, _ in value_node.value:
                if isinstance(child, ScalarNode):
                    lines[(key_node.value, child.value)] = child.start_mark.line + 1
    return lines

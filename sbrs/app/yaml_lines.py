"""YAML loading that remembers the line of every key, so validation errors can name ``file:line: field``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sbrs.errors import InputError

Path_ = tuple[str | int, ...]


class LocatedYaml:
    """A parsed YAML document plus the 1-based line of each key path (``("scenarios", 0, "name")``)."""

    def __init__(self, data: Any, lines: dict[Path_, int], file: str) -> None:
        self.data = data
        self.lines = lines
        self.file = file

    def line_of(self, path: Path_) -> int | None:
        """Line of ``path`` or of its nearest located ancestor."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def error(self, path: Path_, message: str) -> InputError:
        return InputError(message, file=self.file, line=self.line_of(path), field=format_path(path) or None)


def format_path(path: Path_) -> str:
    """("scenarios", 2, "requirements") → "scenarios[2].requirements"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_path(field: str) -> Path_:
    """Inverse of ``format_path``."""
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", field):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _convert(node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                raise InputError("merge keys ('<<: *anchor') are not supported: write the keys out", file=file,
                                 line=key_node.start_mark.line + 1, field=format_path(path) or None)
            key = yaml.safe_load(yaml.serialize(key_node)) if not isinstance(key_node, yaml.ScalarNode) \
                else _scalar(key_node, path, file)
            if not isinstance(key, str):
                raise InputError(f"mapping keys must be strings, got {key!r}", file=file,
                                 line=key_node.start_mark.line + 1, field=format_path(path) or None)
            if key in result:
                raise InputError("duplicate key", file=file, line=key_node.start_mark.line + 1,
                                 field=format_path((*path, key)))
            lines[(*path, key)] = key_node.start_mark.line + 1
            result[key] = _convert(value_node, (*path, key), lines, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, index), lines, file) for index, item in enumerate(node.value)]
    return _scalar(node, path, file)


STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"


def _scalar(node: yaml.ScalarNode, path: Path_, file: str) -> Any:
    """The value of a scalar as YAML's safe loader makes it; a value that is none of its types (``!!int x``, an
    unknown ``!tag``) is an ``InputError`` naming the line and field."""
    if node.tag == STR_TAG:
        return node.value
    if node.tag == NULL_TAG:  # also ``key:`` with nothing after it, which serialised alone is no document at all
        return None
    try:
        return yaml.SafeLoader(yaml.serialize(node)).get_single_data()
    except Exception as exc:  # the constructors raise ValueError, KeyError, ... on a value their tag does not take
        problem = getattr(exc, "problem", None) or f"{type(exc).__name__}: {exc}"
        raise InputError(f"invalid YAML value {node.value[:40]!r} for the tag {node.tag}: {problem}", file=file,
                         line=node.start_mark.line + 1, field=format_path(path) or None) from None


MAX_YAML_BYTES = 1 << 20
"""An app or scenario file is a few kB; a larger file is refused before it is parsed."""
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000
"""Nodes of the document once every alias is expanded: an alias "bomb" of a few lines names billions."""


def _check_size(root: yaml.Node, file: str) -> None:
    """Refuse a document deeper than ``MAX_YAML_DEPTH`` or larger than ``MAX_YAML_NODES`` with its aliases
    expanded, counting each shared (aliased) node once: linear in the file, whatever the aliases expand to."""
    expanded: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in expanded:
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in expanded)
            if len(stack) > MAX_YAML_NODES:
                raise InputError(f"YAML document too large (more than {MAX_YAML_NODES} nodes)", file=file)
            continue
        expanded[key] = 1 + sum(expanded[id(child)] for child in children)
        depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
        if expanded[key] > MAX_YAML_NODES:
            raise InputError(f"YAML document too large: more than {MAX_YAML_NODES} nodes with its aliases expanded",
                             file=file, line=node.start_mark.line + 1)
        if depth[key] > MAX_YAML_DEPTH:
            raise InputError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", file=file,
                             line=node.start_mark.line + 1)


def load_yaml(path: str | Path) -> LocatedYaml:
    """Parse one YAML file; a missing file or a syntax error is an ``InputError`` naming the file and line.

    Bounded: at most ``MAX_YAML_BYTES`` of text, ``MAX_YAML_DEPTH`` levels and ``MAX_YAML_NODES`` nodes with
    aliases expanded, each checked before the document is converted.
    """
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("is a folder, not a YAML file" if path.is_dir() else "no such file", file=file)
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise InputError(f"file too large for an app or scenario file (more than {MAX_YAML_BYTES} bytes)",
                             file=file)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=file) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"invalid YAML: {problem}", file=file,
                         line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise InputError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", file=file) from None
    if root is None:
        raise InputError("empty YAML document", file=file)
    _check_size(root, file)
    lines: dict[Path_, int] = {}
    try:
        data = _convert(root, (), lines, file)
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML value: {exc}", file=file) from None
    return LocatedYaml(data, lines, file)

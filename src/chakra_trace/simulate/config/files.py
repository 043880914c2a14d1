"""Reading the config files: their text, JSON and YAML, each with the line of every top-level
key so that a wrong value's message can point at it. Problems with the file itself (missing,
not UTF-8, not valid JSON or YAML, a key given twice) raise ChakraError naming the file and
line."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from yaml.reader import ReaderError

from ...errors import ChakraError, reader_limit
from .values import show


def read_text(path) -> str:
    """A file's UTF-8 text, without a byte-order mark."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ChakraError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChakraError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


# ----------------------------------------------------------------------------- JSON


def load_json(text: str, source: str) -> Any:
    """JSON text as Python values; a key given twice in one object is an error (Python's reader
    would keep the last one silently)."""

    def no_duplicates(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ChakraError(f"{source}: key {k!r} appears twice")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise ChakraError(f"{source}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        raise _limit_error(e, text, source, "JSON") from None


def _limit_error(e: Exception, text: str, source: str, kind: str) -> Exception:
    """A reader's refusal of an over-long integer or too-deep nesting as one ChakraError line."""
    limit = reader_limit(e, text)
    if limit is None:
        return e
    reason, at = limit
    deep = isinstance(e, RecursionError)  # where the reader gave up is not known
    where = "" if deep else f":{text.count(chr(10), 0, at) + 1}:{at - text.rfind(chr(10), 0, at)}"
    return ChakraError(f"{source}{where}: not accepted as {kind}: {reason}")


_JSON_KEY_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"\s*:')


def json_key_lines(text: str) -> dict[str, int]:
    """Line of the first occurrence of each key (for error messages only)."""
    lines: dict[str, int] = {}
    for m in _JSON_KEY_RE.finditer(text):
        try:
            key = json.loads(f'"{m.group(1)}"')
        except ValueError:
            continue
        lines.setdefault(key, text.count("\n", 0, m.start()) + 1)
    return lines


# ----------------------------------------------------------------------------- YAML


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading ``1e2`` and ``1.5e3`` as numbers: YAML 1.1 wants a dot
    and a signed exponent, but ASTRA-sim's reader (yaml-cpp, YAML 1.2) takes them, and
    `Network.to_yaml` writes them (``repr(1e-05)``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """A YAML document (an empty or null one is an empty mapping) and the line of each top-level key.
    Several documents, and a top-level key given twice (PyYAML would keep the last one
    silently), are errors."""
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            lines = _key_lines(node, source)
            data = None if node is None else loader.construct_document(node)
            return ({} if data is None else data), lines
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        raise ChakraError(_yaml_message(e, source)) from None
    except (ValueError, RecursionError) as e:
        raise _limit_error(e, text, source, "YAML") from None
    except ReaderError as e:  # a control character in the text
        line = text.count("\n", 0, e.position) + 1
        column = e.position - text.rfind("\n", 0, e.position)
        raise ChakraError(
            f"{source}:{line}:{column}: not valid YAML: unacceptable character #x{e.character:04x}: {e.reason}"
        ) from None


def parse_yaml(text: str, source: str = "<string>") -> dict:
    """The mapping a YAML text holds (a network file's shape; ``{}`` when empty). Anything else,
    and every problem `load_yaml` finds, raises ChakraError naming ``source`` and the line."""
    data, _ = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ChakraError(f"{source}: expected a mapping of keys to values, got {show(data)}")
    return data


def _key_lines(node: yaml.Node | None, source: str) -> dict[str, int]:
    """Line of each top-level key; a key given twice raises."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if key.value in lines:
                    raise ChakraError(
                        f"{source}:{line}: duplicate key {key.value!r} (first on line {lines[key.value]})"
                    )
                lines[key.value] = line
    return lines


def _yaml_message(e: yaml.MarkedYAMLError, source: str) -> str:
    """PyYAML's error on one line: where the problem is, then what PyYAML was reading (and
    from which line) and what it found."""
    mark = e.problem_mark or e.context_mark
    at = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    parts = []
    if e.context:
        parts.append(e.context + (f" (line {e.context_mark.line + 1})" if e.context_mark else ""))
    if e.problem:
        parts.append(e.problem)
    return f"{at}: not valid YAML: " + " ".join(", ".join(parts).split())

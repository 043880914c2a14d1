"""Small documents people share (configs, sweep specs, models, profiles, results) read as data.

Every such file may come from someone else, so it is read the one way this module gives: a
regular file only (a FIFO would block for ever, `/dev/zero` never ends), at most a size limit
(after gunzipping, with the trace reader's ratio guard), UTF-8, and JSON or YAML whose readers'
own limits (long integers, deep nesting, YAML aliases that expand without end) become one-line
errors naming the file and line.
"""

from __future__ import annotations

import io
import json
import os
import re
import reprlib
import stat
from typing import Any

import yaml
from yaml.reader import ReaderError

from ..errors import ChakraError, reader_limit
from .files import kind_of
from .memory import env_int
from .stream import GZIP_MAGIC, Limits, _GuardedGzip

DOCUMENT_LIMIT_ENV = "CHAKRA_MAX_DOCUMENT_BYTES"
#: A document's bytes (decompressed): a config or model is kilobytes; JSON of this size already
#: builds ~1 GiB of Python objects in the worst case.
DEFAULT_DOCUMENT_BYTES = 64 << 20
#: Values a YAML document may expand to once its aliases are followed (a billion-laughs file
#: holds ~100 nodes that expand to 10^9).
MAX_YAML_VALUES = 1_000_000
_PIECE = 1 << 20


def document_limit() -> int:
    """Bytes a document may hold: $CHAKRA_MAX_DOCUMENT_BYTES, else 64 MiB."""
    return env_int(DOCUMENT_LIMIT_ENV, "a number of bytes") or DEFAULT_DOCUMENT_BYTES


def open_regular(path: str | os.PathLike, what: str = "file") -> io.FileIO:
    """`path` opened for reading if it is a regular file (links followed); anything else is a
    ChakraError naming it. The open never blocks: a FIFO is opened non-blocking, then refused."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise ChakraError(f"{p}: a folder, not a {what}") from None
    except OSError as e:
        raise ChakraError(f"{p}: cannot read the {what}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ChakraError(f"{p}: {kind_of(mode)}, not a {what} (only regular files are read)")
    os.set_blocking(fd, True)
    return io.FileIO(fd, "rb", closefd=True)


def read_bytes(path: str | os.PathLike, what: str = "file", limit: int | None = None) -> bytes:
    """A regular file's bytes, gunzipped when it starts with the gzip magic; more than `limit`
    bytes (default: `document_limit()`) either way, or a gzip bomb, is a ChakraError."""
    p = os.fspath(path)
    limit = document_limit() if limit is None else limit
    with open_regular(p, what) as raw:
        size = os.fstat(raw.fileno()).st_size
        head = raw.read(2)
        raw.seek(0)
        if head == GZIP_MAGIC:
            reader: Any = io.BufferedReader(_GuardedGzip(raw, p, Limits(max_bytes=limit)))
        else:
            if size > limit:
                raise ChakraError(
                    f"{p}: {size} bytes, more than the {limit} a {what} may hold (set {DOCUMENT_LIMIT_ENV})"
                )
            reader = raw
        parts, got = [], 0
        while got <= limit:  # in pieces: a read of `limit` bytes would allocate them all up front
            piece = reader.read(min(_PIECE, limit + 1 - got))
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
    if got > limit:
        raise ChakraError(f"{p}: more than the {limit} bytes a {what} may hold (set {DOCUMENT_LIMIT_ENV})")
    return b"".join(parts)


def read_text(path: str | os.PathLike, what: str = "file", limit: int | None = None) -> str:
    """A regular file's UTF-8 text (see `read_bytes`), without a byte-order mark."""
    raw = read_bytes(path, what, limit)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChakraError(f"{os.fspath(path)}: not UTF-8 text (byte offset {e.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_json(path: str | os.PathLike, what: str = "JSON file", limit: int | None = None) -> Any:
    """`load_json` of `read_text`: the JSON value a bounded regular file holds."""
    return load_json(read_text(path, what, limit), os.fspath(path))


# ----------------------------------------------------------------------------- JSON


def load_json(text: str, source: str) -> Any:
    """JSON text as Python values; a key given twice in one object is an error (Python's reader
    would keep the last one silently)."""

    def no_duplicates(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ChakraError(f"{source}: key {short(k)} appears twice")
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


def _expanded_size(root: yaml.Node, limit: int, source: str) -> None:
    """Refuse a document whose aliases expand past `limit` values: PyYAML shares an alias's
    value, but whatever walks the result (a check, an error message, json.dumps) expands it.
    Sizes are memoized per node, so a bomb is measured in time linear in its text."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            total = 1 + sum(sizes.get(id(c), 0) for c in children)
            sizes[key] = total
            if total > limit:
                raise ChakraError(
                    f"{source}:{node.start_mark.line + 1}: the document expands to more than {limit} values "
                    "through its aliases (a YAML alias bomb?)"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ChakraError(f"{source}:{node.start_mark.line + 1}: a YAML alias refers to itself")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def load_yaml(text: str, source: str, max_values: int = MAX_YAML_VALUES) -> tuple[Any, dict[str, int]]:
    """A YAML document (an empty or null one is an empty mapping) and the line of each top-level key.
    Several documents, a top-level key given twice (PyYAML would keep the last one silently), and
    aliases that expand past `max_values` values are errors."""
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            lines = _key_lines(node, source)
            if node is not None:
                _expanded_size(node, max_values, source)
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


def read_yaml(path: str | os.PathLike, what: str = "YAML file", limit: int | None = None) -> tuple[Any, dict[str, int]]:
    """`load_yaml` of `read_text`: a bounded regular file's YAML document and its top-level key lines."""
    return load_yaml(read_text(path, what, limit), os.fspath(path))


def _key_lines(node: yaml.Node | None, source: str) -> dict[str, int]:
    """Line of each top-level key; a key given twice raises."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                line = key.start_mark.line + 1
                if key.value in lines:
                    raise ChakraError(
                        f"{source}:{line}: duplicate key {short(key.value)} (first on line {lines[key.value]})"
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


# ----------------------------------------------------------------------------- messages

_SHORT = reprlib.Repr()
_SHORT.maxstring = 80
_SHORT.maxother = 80
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3


def short(value: Any) -> str:
    """A value as an error message quotes it: bounded in length and depth whatever its size (a
    list shared a billion times through YAML aliases prints as a few elements)."""
    return _SHORT.repr(value)

"""YAML source loading with positions: the thin I/O edge under every document.

Documents are parsed with ruamel.yaml's composer (not its constructor) so that every
node keeps its line and column and duplicate keys are *reported* (``E_DUPLICATE_KEY``)
rather than silently overwritten or raised as an exception. The result of loading one
YAML document is plain JSON-like data (dict/list/str/int/float/bool/None) plus a
:class:`SourceMap` from field paths to positions, which the document models, the
checker and the expression parser use to point diagnostics at the exact character.

Contract: :func:`load_yaml_documents` never raises for any input text; every problem
(syntax, unsupported tags, non-JSON scalars, oversize documents) is a diagnostic.

It is the one bounded loader of every document the project reads (``dmn lint``,
``dmn compile``, the lab's ``apply``/``delete``): the input size is checked before any
parsing (:data:`MAX_BYTES`); then one streaming pass over the parser's events (no
recursion, no alias expansion) checks nesting depth, node count and aliases and reports
the first bound crossed at its exact line and column (``E_LIMIT``) — nothing is composed
after such a structural error, so no cascade of secondary errors follows it. Bytes that
are not UTF-8 are ``E_SYNTAX`` at the line and column of the first bad byte, and so is a
character YAML does not allow (NUL and the other C0/C1 controls, lone surrogates): the
parser itself would report those at no position. An integer literal with more digits than
Python converts is ``E_LIMIT`` (not "a string").

Aliases: the node count is of the document *with aliases expanded* (an alias adds the
size of its anchor's subtree), so an alias bomb is ``E_LIMIT`` at the alias that crosses
the bound, before anything is composed. A value reached through an alias is the anchor's
node (the composer shares it), so its own position would be the anchor's, the same for
every use; instead every path under an alias is placed at that alias (``*name``), where
the path enters the shared value — two uses of a bad anchor give two positions.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML

from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan

Path = tuple[str | int, ...]

#: Upper bound on nodes converted per document (aliases are expanded, so this also
#: stops "billion laughs" documents).
MAX_NODES = 200_000
#: Upper bound on the input size, checked before parsing (the API server's request limit
#: is 3 MiB; no document of this project comes close to it).
MAX_BYTES = 3 * 1024 * 1024
#: Upper bound on mapping/sequence nesting (the composer and converter recurse).
MAX_DEPTH = 100
#: Upper bound on alias references per document (Kubernetes manifests use none).
MAX_ALIASES = 100
#: Digits Python converts to an int by default (``sys.get_int_max_str_digits``).
MAX_INT_DIGITS = 4300

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """Where one value sits: its own start, the start of its mapping key (if any),
    and for scalars the quoting style (``None`` plain, ``'"'``, ``"'"``, ``'|'``, ``'>'``)."""

    span: SourceSpan
    key_span: SourceSpan | None = None
    style: str | None = None
    #: For a scalar spread over several source lines (block ``|``/``>`` scalars, folded
    #: plain or quoted ones): its value and the source (line, column) of each character.
    chars: tuple[str, tuple[tuple[int, int], ...]] | None = None
    #: The value was reached through an alias; ``span`` is that alias's position.
    via_alias: bool = False


@dataclass(slots=True)
class SourceMap:
    """Field path -> position for one document. Paths use the document's own keys."""

    file: str
    nodes: dict[Path, NodeInfo] = field(default_factory=dict, repr=False)

    def span(self, path: Path) -> SourceSpan | None:
        """The closest known position for ``path`` (walking up to its parents)."""
        p = tuple(path)
        while True:
            info = self.nodes.get(p)
            if info is not None:
                return info.span
            if not p:
                return SourceSpan(self.file, 1, 1)
            p = p[:-1]

    def key_span(self, path: Path) -> SourceSpan | None:
        """Position of the key that introduces ``path`` (for unknown-field errors)."""
        info = self.nodes.get(tuple(path))
        if info is not None and info.key_span is not None:
            return info.key_span
        return self.span(path)

    def expression_span(self, path: Path, column: int, line: int = 1) -> SourceSpan | None:
        """Position of character ``column`` (1-based) on line ``line`` of the scalar at
        ``path``: the YAML position of the scalar plus the offset inside the expression."""
        info = self.nodes.get(tuple(path))
        if info is None:
            return self.span(path)
        base = info.span
        if info.via_alias:  # the text is at the anchor; the path enters it at the alias
            return base
        if info.chars is not None:
            value, positions = info.chars
            offset = sum(len(text) + 1 for text in value.split("\n")[: line - 1]) + column - 1
            if 0 <= offset < len(positions):
                at_line, at_column = positions[offset]
            elif positions:  # just past the end (an unexpected end of the expression)
                at_line, at_column = positions[-1][0], positions[-1][1] + 1
            else:
                return SourceSpan(base.file, base.line + 1, 1)
            return SourceSpan(base.file, at_line, at_column)
        if line > 1:
            return SourceSpan(base.file, base.line + line - 1, column)
        quote = 1 if info.style in ('"', "'") else 0
        return SourceSpan(base.file, base.line, base.column + quote + column - 1)


class ExpressionSpans:
    """The span function of the expression scalar at ``path`` of ``source``: (line, column)
    inside the expression -> absolute position (:meth:`SourceMap.expression_span`).

    Equal and hashable by the source map's *identity* and the path, so that the expression
    parser can reuse the AST it built for the same text at the same position (a source map
    is filled while its document loads and not changed afterwards)."""

    __slots__ = ("path", "source")

    def __init__(self, source: SourceMap, path: Path) -> None:
        self.source = source
        self.path = tuple(path)

    def __call__(self, line: int, column: int) -> SourceSpan | None:
        return self.source.expression_span(self.path, column, line)

    def __hash__(self) -> int:
        return hash((id(self.source), self.path))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ExpressionSpans)
            and other.source is self.source
            and other.path == self.path
        )


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """One YAML document: its data, positions and index in the file (0-based)."""

    data: Any
    source: SourceMap
    index: int = 0


def path_text(path: Path) -> str:
    """Render a field path the way diagnostics show it: ``spec.hooks.connect.effects[0].id``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _scalar_positions(
    lines: list[str], node: Any, value: str
) -> tuple[tuple[int, int], ...] | None:
    """Source (line, column), 1-based, of every character of a multi-line scalar.

    YAML folds line breaks of plain, quoted and ``>`` scalars into spaces and drops the
    indentation of block scalars, so a column inside the value is not a column in the
    file. The characters of the source are aligned with the value: a line break matches
    a space or newline of the value; escapes that do not match are skipped over.
    """
    start, end = node.start_mark, node.end_mark
    style = getattr(node, "style", None)
    first, last = int(start.line), min(int(end.line), len(lines) - 1)
    if last <= first and style not in ("|", ">"):
        return None
    src: list[tuple[str | None, int, int]] = []  # None: a line break
    if style in ("|", ">"):
        indent: int | None = None
        for i in range(first + 1, len(lines)):
            raw = lines[i]
            lead = len(raw) - len(raw.lstrip(" "))
            if raw.strip() and indent is not None and lead < indent:
                break
            if raw.strip() and indent is None:
                indent = lead
            body = raw[indent:] if indent is not None else ""
            src += [(ch, i + 1, (indent or 0) + k + 1) for k, ch in enumerate(body)]
            src.append((None, i + 1, (indent or 0) + len(body) + 1))
            if i > last and indent is not None:
                break
    else:
        column = int(start.column) + (1 if style in ('"', "'") else 0)
        for i in range(first, last + 1):
            raw = lines[i]
            begin = column if i == first else len(raw) - len(raw.lstrip(" \t"))
            src += [(ch, i + 1, begin + k + 1) for k, ch in enumerate(raw[begin:])]
            src.append((None, i + 1, len(raw) + 1))
    out: list[tuple[int, int]] = []
    j = 0
    here = (src[0][1], src[0][2]) if src else (first + 2, 1)
    for ch in value:
        while j < len(src) and src[j][0] is None and ch not in " \n":
            j += 1  # a break the value dropped
        if j < len(src) and (src[j][0] == ch or (src[j][0] is None and ch in " \n")):
            here = (src[j][1], src[j][2])
            j += 1
        else:  # an escape or quote doubling: find the character a little further on
            ahead = next((k for k in range(j, min(j + 6, len(src))) if src[k][0] == ch), None)
            if ahead is not None:
                here = (src[ahead][1], src[ahead][2])
                j = ahead + 1
        out.append(here)
    return tuple(out)


class _Converter:
    """Composed nodes -> plain data plus the :class:`SourceMap`.

    ``alias_spans`` are the positions of the document's alias events in document order
    (from :func:`_event_pass`); the converter walks the nodes in the same order, and a node
    met a second time outside an alias expansion is the next alias's use."""

    def __init__(
        self,
        file: str,
        diagnostics: list[Diagnostic],
        text: str = "",
        alias_spans: tuple[SourceSpan, ...] = (),
    ) -> None:
        self.file = file
        self.lines = text.splitlines()
        self.diagnostics = diagnostics
        self.count = 0
        self.source = SourceMap(file)
        self.too_large = False
        self._alias_spans = alias_spans
        self._next_alias = 0
        self._seen: set[int] = set()
        #: while converting an alias's expansion: where that alias is
        self._via: SourceSpan | None = None

    def _alias_use(self, node: Any) -> SourceSpan | None:
        """The alias position when ``node`` is met again outside an expansion, else None
        (and ``node`` is remembered)."""
        if self._via is not None:
            return None
        if id(node) not in self._seen:
            self._seen.add(id(node))
            return None
        if self._next_alias < len(self._alias_spans):
            self._next_alias += 1
            return self._alias_spans[self._next_alias - 1]
        return self.mark(node)

    def mark(self, node: Any) -> SourceSpan:
        m = node.start_mark
        return SourceSpan(self.file, int(m.line) + 1, int(m.column) + 1)

    def error(self, code: Code, message: str, span: SourceSpan, path: Path) -> None:
        self.diagnostics.append(Diagnostic.at(code, message, span, path_text(path)))

    def convert(self, node: Any, path: Path, key_span: SourceSpan | None) -> Any:
        alias = self._alias_use(node)
        if alias is None:
            return self._convert(node, path, key_span)
        self._via = alias
        try:
            return self._convert(node, path, key_span)
        finally:
            self._via = None

    def _convert(self, node: Any, path: Path, key_span: SourceSpan | None) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            if not self.too_large:
                self.too_large = True
                self.error(
                    Code.E_LIMIT,
                    f"document has more than {MAX_NODES} nodes (aliases expanded)",
                    self.mark(node),
                    path,
                )
            return None
        via = self._via
        span = self.mark(node) if via is None else via
        tag = str(getattr(node.tag, "value", node.tag))
        kind = type(node).__name__
        style = getattr(node, "style", None) if kind == "ScalarNode" else None
        chars = None
        if via is None and kind == "ScalarNode" and self.lines and isinstance(node.value, str):
            positions = _scalar_positions(self.lines, node, node.value)
            if positions is not None:
                chars = (node.value, positions)
        self.source.nodes[path] = NodeInfo(
            span=span, key_span=key_span, style=style, chars=chars, via_alias=via is not None
        )
        if kind == "MappingNode":
            if tag != _MAP:
                self.error(Code.E_SCHEMA, f"unsupported YAML tag {tag}", span, path)
            return self.mapping(node, path)
        if kind == "SequenceNode":
            if tag != _SEQ:
                self.error(Code.E_SCHEMA, f"unsupported YAML tag {tag}", span, path)
            return [self.convert(item, (*path, i), self._via) for i, item in enumerate(node.value)]
        return self.scalar(node, tag, span, path)

    def mapping(self, node: Any, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            kspan = self._alias_use(key_node) or self._via or self.mark(key_node)
            if type(key_node).__name__ != "ScalarNode":
                self.error(Code.E_SCHEMA, "mapping keys must be plain strings", kspan, path)
                self._pass_over(key_node)
                continue
            key_tag = str(getattr(key_node.tag, "value", key_node.tag))
            key_value = self.scalar(key_node, key_tag, kspan, path)
            key = key_value if isinstance(key_value, str) else str(key_node.value)
            if key in out:
                self.error(
                    Code.E_DUPLICATE_KEY,
                    f"duplicate key {key!r}",
                    kspan,
                    (*path, key),
                )
                continue
            out[key] = self.convert(value_node, (*path, key), kspan)
        return out

    def _pass_over(self, node: Any) -> None:
        """Account for the aliases inside a node that is not converted (a collection used
        as a key), so later aliases keep their positions."""
        stack = [node]
        while stack:
            here = stack.pop()
            if type(here).__name__ == "MappingNode":
                items = [part for pair in here.value for part in pair]
            elif type(here).__name__ == "SequenceNode":
                items = list(here.value)
            else:
                continue
            for item in reversed(items):  # popped in document order
                if self._alias_use(item) is None:
                    stack.append(item)

    def scalar(self, node: Any, tag: str, span: SourceSpan, path: Path) -> Any:
        raw = str(node.value)
        if tag in (_STR, _TIMESTAMP):
            return raw
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return raw.lower() == "true"
        if tag == _INT:
            text = raw.replace("_", "")
            digits = len(text.lstrip("+-"))
            if digits > MAX_INT_DIGITS:
                self.error(
                    Code.E_LIMIT,
                    f"integer literal with {digits} digits is out of range "
                    f"(at most {MAX_INT_DIGITS} digits)",
                    span,
                    path,
                )
                return None
            try:
                if text.lower().startswith(("0x", "+0x", "-0x")):
                    return int(text, 16)
                if text.lower().startswith(("0o", "+0o", "-0o")):
                    return int(text, 8)
                if text.lower().startswith(("0b", "+0b", "-0b")):
                    return int(text, 2)
                return int(text, 10)
            except ValueError:
                return raw
        if tag == _FLOAT:
            try:
                value = float(raw.replace("_", ""))
            except ValueError:
                return raw
            if math.isnan(value) or math.isinf(value):
                self.error(Code.E_SCHEMA, f"non-finite number {raw!r}", span, path)
                return None
            return value
        self.error(Code.E_SCHEMA, f"unsupported YAML tag {tag}", span, path)
        return raw


def _composer() -> YAML:
    """libyaml's composer (ruamel.yaml.clib) when installed — about 5x faster — else the
    pure-Python one. Both resolve tags identically and keep every key of a mapping."""
    fast = YAML(typ="safe", pure=False)
    if getattr(fast, "Parser", None) is not None and fast.Parser.__name__ == "CParser":
        return fast
    return _pure_composer()


def _pure_composer() -> YAML:
    """The pure-Python composer. Not the round-trip one: its scanner leaves fold markers
    (``\\x07``) inside folded scalars."""
    return YAML(typ="safe", pure=True)


def _yaml_error_span(file: str, exc: Exception, text: str) -> SourceSpan:
    """Where the parser stopped, kept inside the document: at the end of the stream the
    scanner's mark may sit on a line after the last one (text without a final newline),
    which then reads as one past the end of the last line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        try:
            line, column = int(mark.line) + 1, int(mark.column) + 1
        except (TypeError, ValueError):
            return SourceSpan(file, 1, 1)
        lines = text.split("\n")
        if line > len(lines):
            line, column = len(lines), len(lines[-1]) + 1
        return SourceSpan(file, line, min(column, len(lines[line - 1]) + 1))
    return SourceSpan(file, 1, 1)


def load_yaml_documents(
    text: str | bytes, file: str = "<input>"
) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Parse every YAML document in ``text``; positions are 1-based.

    Returns the documents that could be composed and all diagnostics. A syntax error
    stops parsing (YAML cannot resynchronise) but documents before it are kept.
    Empty documents (only comments) are skipped.
    """
    diagnostics: list[Diagnostic] = []
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    too_large = size_problem(size, file)
    if too_large is not None:
        return [], [too_large]
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [], [_encoding_error(raw, exc, file)]
    unprintable = _unprintable_problem(text, file)
    if unprintable is not None:
        return [], [unprintable]
    yaml = _composer()
    bound, alias_spans = _event_pass(yaml, text, file)
    if bound is not None:
        return [], [bound]
    documents: list[YamlDocument] = []
    try:
        for index, node in enumerate(yaml.compose_all(io.StringIO(text))):
            aliases = alias_spans[index] if index < len(alias_spans) else ()
            if node is None or (
                type(node).__name__ == "ScalarNode"
                and str(getattr(node.tag, "value", node.tag)) == _NULL
                and node.value == ""
            ):
                continue
            conv = _Converter(file, diagnostics, text, aliases)
            data = conv.convert(node, (), None)
            documents.append(YamlDocument(data=data, source=conv.source, index=index))
    except RecursionError:
        diagnostics.append(
            Diagnostic.at(Code.E_SYNTAX, "document nests too deeply", SourceSpan(file, 1, 1))
        )
    except Exception as exc:  # ruamel raises many unrelated types for bad input
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0] if str(exc) else ""
        message = f"invalid YAML: {problem}" if problem else f"invalid YAML ({type(exc).__name__})"
        diagnostics.append(Diagnostic.at(Code.E_SYNTAX, message, _yaml_error_span(file, exc, text)))
    return documents, diagnostics


def size_problem(size: int, file: str) -> Diagnostic | None:
    """``E_LIMIT`` when an input of ``size`` bytes is over :data:`MAX_BYTES`, else None.

    Callers that read files check the size (``stat``) before reading them.
    """
    if size <= MAX_BYTES:
        return None
    return Diagnostic.at(
        Code.E_LIMIT,
        f"input is {size} bytes; the limit is {MAX_BYTES} bytes",
        SourceSpan(file, 1, 1),
    )


def _encoding_error(data: bytes, exc: UnicodeDecodeError, file: str) -> Diagnostic:
    """``E_SYNTAX`` at the line and column (in characters) of the first byte that is not
    UTF-8."""
    before = data[: exc.start]
    line = before.count(b"\n") + 1
    line_start = before.rfind(b"\n") + 1
    column = len(before[line_start:].decode("utf-8", errors="replace")) + 1
    return Diagnostic.at(
        Code.E_SYNTAX,
        f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}",
        SourceSpan(file, line, column),
    )


def _event_pass(
    yaml: YAML, text: str, file: str
) -> tuple[Diagnostic | None, list[tuple[SourceSpan, ...]]]:
    """One streaming pass over the parser's events (no recursion, no alias expansion).

    Returns the first nesting, node-count or alias bound crossed, at its position (None
    when the text stays within them), and the positions of each document's aliases in
    document order. Nodes are counted with aliases expanded: an alias adds its anchor's
    subtree size. A syntax error ends the pass silently — composing reports it with its
    position."""
    depth = nodes = aliases = 0
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, node count before it)
    documents: list[tuple[SourceSpan, ...]] = []
    spans: list[SourceSpan] = []

    def span(event: Any) -> SourceSpan:
        mark = event.start_mark
        return SourceSpan(file, int(mark.line) + 1, int(mark.column) + 1)

    def at(event: Any, message: str) -> Diagnostic:
        return Diagnostic.at(Code.E_LIMIT, message, span(event))

    try:
        for event in yaml.parse(io.StringIO(text)):
            name = type(event).__name__
            if name == "DocumentStartEvent":
                depth = nodes = aliases = 0
                sizes, open_nodes, spans = {}, [], []
            elif name == "DocumentEndEvent":
                documents.append(tuple(spans))
            elif name in ("MappingStartEvent", "SequenceStartEvent"):
                depth += 1
                open_nodes.append((event.anchor, nodes))
                nodes += 1
                if depth > MAX_DEPTH:
                    return at(event, f"document nests deeper than {MAX_DEPTH} levels"), []
            elif name in ("MappingEndEvent", "SequenceEndEvent"):
                depth -= 1
                anchor, before = open_nodes.pop()
                if anchor is not None:
                    sizes[anchor] = nodes - before
            elif name == "ScalarEvent":
                nodes += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif name == "AliasEvent":
                aliases += 1
                spans.append(span(event))
                if aliases > MAX_ALIASES:
                    return at(event, f"document uses more than {MAX_ALIASES} aliases"), []
                nodes += sizes.get(event.anchor, 1)
                if nodes > MAX_NODES:
                    return at(
                        event, f"document has more than {MAX_NODES} nodes (aliases expanded)"
                    ), []
            if nodes > MAX_NODES:
                return at(event, f"document has more than {MAX_NODES} nodes"), []
    except Exception:  # ruamel raises many types for bad input; composing reports them
        return None, documents
    return None, documents


#: Characters YAML 1.2 allows in a stream (its c-printable production); the parser
#: rejects the others without a position.
_UNPRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def _unprintable_problem(text: str, file: str) -> Diagnostic | None:
    """``E_SYNTAX`` at the line and column of the first character YAML does not allow."""
    found = _UNPRINTABLE.search(text)
    if found is None:
        return None
    at = found.start()
    line_start = text.rfind("\n", 0, at) + 1
    return Diagnostic.at(
        Code.E_SYNTAX,
        f"character U+{ord(found.group()):04X} is not allowed in YAML",
        SourceSpan(file, text.count("\n", 0, at) + 1, at - line_start + 1),
    )

"""One JSON object's big array, read in pieces: the file is never in memory whole.

A Kineto trace is one JSON object, ``{"schemaVersion": 1, ..., "traceEvents":
[ev, ev, ...], "traceName": ...}``, that reaches gigabytes. :func:`read_array`
reads it, plain or gzip, in chunks of :data:`CHUNK_BYTES` (1 MiB), and hands the
array's elements to a ``decode`` function in *pieces* of about
:data:`PIECE_BYTES`: byte strings ``[ev, ..., ev]`` that are each valid JSON.
So memory holds one piece and what ``decode`` makes of it, not the file.

Where a piece is cut
    Fast: at the first ``}``, ``,``, ``{`` (whitespace allowed between) after
    the target size, which is an event boundary in every trace writer's
    layout. Such a cut can land inside a string or a nested object; then the
    piece is not valid JSON, and the cut is made again exactly, by scanning the
    bytes for strings, escapes and nesting depth (:func:`exact_cut`, numpy).

Why a piece that parses was cut right
    A piece starts at a boundary (the array's start, or after a comma at depth
    0) and the lexer is deterministic, so if ``[`` + piece + ``]`` parses, the
    piece ended at depth 0 outside any string: after a complete element.

The keys before the array and after it are parsed on their own and returned as
one dict. A file whose array cannot be located this way (no ``traceEvents``
key, not an object, broken JSON before the array) is parsed whole, which gives
the same error messages as any JSON reader, at the same byte offsets.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
import orjson

from advisor.errors import TraceError

__all__ = ["CHUNK_BYTES", "PIECE_BYTES", "MalformedPiece", "error_position", "exact_cut", "read_array"]

#: decompressed bytes read at a time
CHUNK_BYTES = 1 << 20
#: target size of one piece handed to ``decode``
PIECE_BYTES = 1 << 20

T = TypeVar("T")
_FAST_CUT = re.compile(rb"\}\s*,\s*\{")
_ERROR_BYTE = re.compile(r"byte (\d+)")
_WS = b" \t\r\n"
_ARRAY_OPEN = re.compile(rb"\s*:\s*\[")
#: the array's end is looked for among the last _TAIL_TRIES ``]`` in the last _TAIL_SEARCH bytes
_TAIL_SEARCH = 1 << 20
_TAIL_TRIES = 50


class MalformedPiece(ValueError):
    """Raised by a ``decode`` function for bytes that are not valid JSON; ``pos`` is the offset, when known."""

    def __init__(self, message: str, pos: int | None = None) -> None:
        super().__init__(message)
        self.pos = pos


def read_array(path: Path, key: str, decode: Callable[[bytes], T], *,
               on_progress: Callable[[int, int], None] | None = None,
               piece_bytes: int | None = None) -> tuple[dict[str, Any], Iterator[T] | None, Any]:
    """Locate ``key``'s array in the JSON object in ``path`` and decode it piece by piece.

    Returns ``(other_keys, pieces, whole)``: the object's other keys, an
    iterator of ``decode(piece)`` results, and ``None``; or, for a file whose
    array could not be located in the stream, ``({}, None, document)`` with
    the whole parsed document, for the caller to judge. ``piece_bytes``
    defaults to :data:`PIECE_BYTES`. ``decode`` raises
    :class:`MalformedPiece` for bytes that are not valid JSON.
    ``on_progress(done, total)`` is told the file bytes read so far.
    """
    source = _Source(path, on_progress)
    header = source.find_array(key)
    if header is None:
        return {}, None, source.parse_whole()
    return header, _pieces(source, decode, piece_bytes or PIECE_BYTES, header), None


class _Source:
    """The file's decompressed bytes, a window at a time: ``buf[pos:]`` is not yet consumed."""

    def __init__(self, path: Path, on_progress: Callable[[int, int], None] | None) -> None:
        self.path = path
        self.on_progress = on_progress
        try:
            self.raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by _read at the end
            self.total = path.stat().st_size
        except FileNotFoundError:
            raise TraceError(path, "no such file") from None
        except IsADirectoryError:
            raise TraceError(path, "is a directory, not a trace file") from None
        except OSError as exc:
            raise TraceError(path, f"cannot be read: {exc.strerror}") from None
        self.stream: BinaryIO = self.raw
        if self.raw.read(2) == b"\x1f\x8b":
            self.stream = gzip.GzipFile(fileobj=self.raw, mode="rb")  # type: ignore[assignment]
        self.raw.seek(0)
        self.buf = b""
        self.pos = 0
        self.offset = 0  # file offset (decompressed) of buf[0]
        self.eof = False

    def read_more(self, at_least: int = CHUNK_BYTES) -> bool:
        """Append at least ``at_least`` bytes (fewer at the end); drop what is consumed. False at the end."""
        if self.eof:
            return False
        parts = [self.buf[self.pos:]]
        got = 0
        while got < at_least:
            chunk = self._read(max(CHUNK_BYTES, at_least - got))
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            got += len(chunk)
        self.offset += self.pos
        self.buf = b"".join(parts)
        self.pos = 0
        return got > 0

    def _read(self, n: int) -> bytes:
        try:
            chunk = self.stream.read(n)
        except EOFError:
            raise TraceError(self.path, "the gzip stream is truncated; the file was cut short while being written "
                                        "or copied") from None
        except (OSError, zlib.error) as exc:
            raise TraceError(self.path, f"is not a valid gzip file ({exc})") from None
        if self.on_progress is not None:
            self.on_progress(self.raw.tell(), self.total)
        if not chunk:
            self.stream.close()
            self.raw.close()
        return chunk

    def find_array(self, key: str) -> dict[str, Any] | None:
        """Consume up to the array's ``[``; return the object's keys before it, or None if not found."""
        needle = orjson.dumps(key)
        searched = 0
        while True:
            k = self.buf.find(needle, max(searched - len(needle), 0))
            while k >= 0:
                header = _object_prefix(self.buf[:k])
                if header is not None:
                    return self._open_bracket(k + len(needle), header)
                k = self.buf.find(needle, k + 1)
            searched = len(self.buf)
            if not self.read_more():
                return None

    def _open_bracket(self, after_key: int, header: dict[str, Any]) -> dict[str, Any] | None:
        match = _ARRAY_OPEN.match(self.buf, after_key)
        while match is None and len(self.buf) - after_key < 64 and self.read_more():
            match = _ARRAY_OPEN.match(self.buf, after_key)
        if match is None:
            return None  # the key's value is not an array: let the whole-document parse say what it is
        self.pos = match.end()
        return header

    def parse_whole(self) -> Any:
        """Read the rest and parse everything read as one JSON document, with one clear error if it is not."""
        while self.read_more():
            pass
        raw = self.buf if self.offset == 0 else None
        if raw is None:  # pragma: no cover - find_array reads from the start and never drops bytes before failing
            raise TraceError(self.path, "could not be re-read from the start")
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _json_error(self.path, exc.msg, exc.pos, len(raw)) from None


def _object_prefix(head: bytes) -> dict[str, Any] | None:
    """The keys of a JSON object's text up to one of its keys, or None if ``head`` is not such a prefix."""
    body = head.rstrip(_WS)
    if body.endswith(b","):
        body = body[:-1]
    try:
        parsed = orjson.loads(body + b"}")
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _pieces(source: _Source, decode: Callable[[bytes], T], piece_bytes: int, meta: dict[str, Any]) -> Iterator[T]:
    """Decode the array's elements a piece at a time; at the end, add the keys after the array to ``meta``."""
    while True:
        short = piece_bytes + CHUNK_BYTES - (len(source.buf) - source.pos)
        if short > 0:
            source.read_more(short)
        start = source.pos
        cut = _fast_cut(source.buf, start, piece_bytes)
        if cut is None:
            if not source.eof:
                source.read_more(len(source.buf) - source.pos + piece_bytes)
                continue
            yield _last_piece(source, decode, meta)
            return
        end, resume = cut
        try:
            result = decode(b"[" + source.buf[start:end] + b"]")
        except MalformedPiece:
            result, resume, last = _decode_exactly(source, decode, piece_bytes, meta)
            if last:
                yield result
                return
        source.pos = resume
        yield result


def _fast_cut(buf: bytes, start: int, piece_bytes: int) -> tuple[int, int] | None:
    """(end of this piece, start of the next) at the first ``}, {`` after the target size, or None."""
    if len(buf) - start <= piece_bytes:
        return None
    match = _FAST_CUT.search(buf, start + piece_bytes)
    if match is None:
        return None
    return match.start() + 1, match.end() - 1


def _decode_exactly(source: _Source, decode: Callable[[bytes], T], piece_bytes: int,
                    meta: dict[str, Any]) -> tuple[T, int, bool]:
    """Cut where the bytes' structure says, and decode; (result, next start, was it the last piece)."""
    start = source.pos
    while True:
        cut = exact_cut(source.buf, start, piece_bytes)
        if cut is not None or source.eof:
            break
        source.read_more(len(source.buf) - start + piece_bytes)
        start = source.pos
    if cut is None:
        raise _json_error(source.path, "the traceEvents array is not closed", source.offset + len(source.buf),
                          source.offset + len(source.buf))
    end, is_last = cut
    piece = source.buf[start:end]
    try:
        result = decode(b"[" + piece + b"]")
    except MalformedPiece as exc:
        pos = source.offset + start + (exc.pos - 1 if exc.pos is not None else len(piece))
        raise _json_error(source.path, str(exc), pos, -1) from None
    if is_last:
        source.pos = end + 1
        while source.read_more():
            pass
        meta.update(_trailer(source, source.buf[source.pos:]))
        return result, source.pos, True
    return result, end + 1, False


def _last_piece(source: _Source, decode: Callable[[bytes], T], meta: dict[str, Any]) -> T:
    """The rest of the array, up to its ``]``, and the object's keys after it.

    Tries the last few ``]`` that follow an element's ``}`` (or the ``[``) and
    are followed by the rest of an object; falls back to the exact scan.
    """
    buf, start = source.buf, source.pos
    end = len(buf)
    floor = max(start, len(buf) - _TAIL_SEARCH)
    for _ in range(_TAIL_TRIES):
        end = buf.rfind(b"]", floor, end)
        if end < 0:
            break
        before = buf[max(start, end - 64):end].rstrip(_WS)
        if not before.endswith(b"}") and (before or end - start > 64):
            continue
        trailer = _try_trailer(buf[end + 1:])
        if trailer is None:
            continue
        try:
            result = decode(b"[" + buf[start:end] + b"]")
        except MalformedPiece:
            break  # that bracket was not the array's: find the end exactly
        meta.update(trailer)
        return result
    result, _, _ = _decode_exactly(source, decode, len(buf) - start, meta)
    return result


def _try_trailer(tail: bytes) -> dict[str, Any] | None:
    body = tail.lstrip(_WS)
    if body.startswith(b","):
        body = body[1:]
    try:
        parsed = orjson.loads(b"{" + body)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _trailer(source: _Source, tail: bytes) -> dict[str, Any]:
    trailer = _try_trailer(tail)
    if trailer is None:
        raise _json_error(source.path, "unexpected text after the traceEvents array", source.offset + source.pos,
                          -1)
    return trailer


def exact_cut(buf: bytes, start: int, target: int) -> tuple[int, bool] | None:
    """Where the array's element sequence starting at ``buf[start]`` can be cut, from its structure.

    Returns ``(index, False)`` for the first comma at depth 0, outside strings,
    at or after ``start + target`` (the piece ends before it), ``(index,
    True)`` for the array's closing ``]``, or None when ``buf`` ends first.
    Vectorised: quotes not escaped by an odd run of backslashes toggle
    "inside a string"; brackets outside strings give the depth.
    """
    a = np.frombuffer(buf, np.uint8)[start:]
    quotes = np.flatnonzero(a == 0x22)
    slashes = np.flatnonzero(a == 0x5C)
    if len(slashes) and len(quotes):
        quotes = quotes[~_escaped(quotes, slashes)]
    structural = np.flatnonzero((a == 0x2C) | (a == 0x5B) | (a == 0x5D) | (a == 0x7B) | (a == 0x7D))
    outside = np.searchsorted(quotes, structural) % 2 == 0
    structural = structural[outside]
    ch = a[structural]
    depth = np.cumsum(np.where((ch == 0x5B) | (ch == 0x7B), 1, np.where((ch == 0x5D) | (ch == 0x7D), -1, 0)))
    closed = np.flatnonzero(depth < 0)
    commas = np.flatnonzero((ch == 0x2C) & (depth == 0) & (structural >= target))
    if len(commas) and (not len(closed) or commas[0] < closed[0]):
        return start + int(structural[commas[0]]), False
    if len(closed):
        return start + int(structural[closed[0]]), True
    return None


def _escaped(quotes: np.ndarray, slashes: np.ndarray) -> np.ndarray:
    """Whether each quote follows an odd run of backslashes."""
    breaks = np.flatnonzero(np.diff(slashes) != 1)
    run_start = slashes[np.concatenate([[0], breaks + 1])]
    run_end = slashes[np.concatenate([breaks, [len(slashes) - 1]])]
    k = np.searchsorted(run_end, quotes - 1)
    k_ok = np.minimum(k, len(run_end) - 1)
    touching = run_end[k_ok] == quotes - 1
    return touching & ((run_end[k_ok] - run_start[k_ok] + 1) % 2 == 1)


def _json_error(path: Path, message: str, pos: int, size: int) -> TraceError:
    hint = "the file ends early; it was probably cut short" if size >= 0 and pos >= size - 1 else \
        "is this a Kineto trace?"
    return TraceError(path, f"is not valid JSON ({message} at byte {pos}); {hint}")


def error_position(message: str) -> int | None:
    """The byte offset in a decoder's error message (``... (byte 123)``), if it gives one."""
    found = _ERROR_BYTE.search(message)
    return int(found.group(1)) if found else None

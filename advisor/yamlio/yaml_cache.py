"""Parsed rule and workflow files kept between runs, so that each run does not check the same YAML again.

Reading the built-in rule files defensively (an event pass, then the
composer, then the line map; see :mod:`advisor.yamlio.safe_yaml`) takes
about 70 ms, most of the rule stage of ``advisor analyze``; reading them
back from this cache takes a few. An entry is keyed by the SHA-256 of the
file's text together with the source of the parser itself, so an edited
file, or a changed check, is parsed again. Only files that parsed without
a problem are stored: ``advisor rules lint`` always sees the problems.

Entries are stored with :mod:`marshal`: plain dicts, lists, tuples, strings
and numbers (NaN and infinities included), nothing that runs. The cache is
one file in ``$ADVISOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/advisor``, else
``~/.cache/advisor``; ``ADVISOR_CACHE_DIR=`` (empty) turns it off. A cache
that cannot be read or written is ignored: it only ever saves time.
"""

from __future__ import annotations

import atexit
import hashlib
import marshal
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CACHE_ENV", "YamlCache", "cache_dir", "named_cache", "shared_cache"]

CACHE_ENV = "ADVISOR_CACHE_DIR"
#: entries kept when the file is rewritten; beyond it only those used by this process stay
MAX_ENTRIES = 500

Parsed = tuple[Any, dict[tuple[Any, ...], int]]


def cache_dir() -> Path | None:
    """Where the cache lives, or None when ``$ADVISOR_CACHE_DIR`` is set empty."""
    if CACHE_ENV in os.environ:
        value = os.environ[CACHE_ENV]
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "advisor"


class YamlCache:
    """Text -> (data, line map) for files that parsed cleanly, in one marshal file."""

    def __init__(self, path: Path | None, parser_key: bytes) -> None:
        self.path = path
        self.parser_key = parser_key
        self._entries: dict[str, bytes] | None = None
        self._used: set[str] = set()
        self._dirty = False

    def get_or_parse(self, text: str, parse: Callable[[], Parsed]) -> Parsed:
        """The cached result for ``text``, else ``parse()`` (whose errors propagate) stored for next time."""
        if self.path is None:
            return parse()
        key = hashlib.sha256(self.parser_key + text.encode("utf-8")).hexdigest()
        entries = self._load()
        blob = entries.get(key)
        if blob is not None:
            try:
                data, lines = marshal.loads(blob)  # fresh objects on every hit: callers may change them
                self._used.add(key)
                return data, dict(lines)
            except (EOFError, ValueError, TypeError):
                entries.pop(key, None)
        data, lines = parse()
        try:
            entries[key] = marshal.dumps((data, tuple(lines.items())))
        except ValueError:  # a value marshal cannot store: just not cached
            return data, lines
        self._used.add(key)
        self._dirty = True
        return data, lines

    def _load(self) -> dict[str, bytes]:
        if self._entries is None:
            self._entries = {}
            try:
                entries = marshal.loads(self.path.read_bytes())  # type: ignore[union-attr]
                if isinstance(entries, dict):
                    self._entries = entries
            except (OSError, EOFError, ValueError, TypeError):
                pass
        return self._entries

    def save(self) -> None:
        """Write the entries back if this process added any (atomically: ranks may save at once)."""
        if not self._dirty or self.path is None or self._entries is None:
            return
        entries = self._entries
        if len(entries) > MAX_ENTRIES:
            entries = {k: v for k, v in entries.items() if k in self._used}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
            with os.fdopen(fd, "wb") as out:
                out.write(marshal.dumps(entries))
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError:
            pass


_shared: YamlCache | None = None


def shared_cache() -> YamlCache:
    """This process's cache, saved when the process exits."""
    global _shared
    if _shared is None:
        folder = cache_dir()
        # marshal's format is tied to the Python version; the parser's source, to what it checks (read, not
        # imported: a run whose files are all cached never imports PyYAML)
        name = f"yaml-py{sys.version_info[0]}{sys.version_info[1]}.marshal"
        try:
            parser_key = hashlib.sha256(Path(__file__).with_name("safe_yaml.py").read_bytes()).digest()
        except OSError:
            folder = None  # no source to key on: no cache
            parser_key = b""
        _shared = YamlCache(folder / name if folder else None, parser_key)
        atexit.register(_shared.save)
    return _shared


_named: dict[str, YamlCache] = {}


def named_cache(name: str, key: bytes) -> YamlCache:
    """A cache of other texts parsed or rendered, in a file of its own (``<name>-pyXY.marshal``), its entries
    keyed by ``key`` (what made them: a parser and its options) with each text; saved when the process exits."""
    cache = _named.get(name)
    if cache is None:
        folder = cache_dir()
        path = folder / f"{name}-py{sys.version_info[0]}{sys.version_info[1]}.marshal" if folder else None
        cache = _named[name] = YamlCache(path, key)
        atexit.register(cache.save)
    return cache

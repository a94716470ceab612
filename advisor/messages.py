"""Terminal text: what the advisor prints is text, never Rich markup.

File and folder names, trace names, exception messages and a script's own
words carry square brackets (``in/[/foo].json``, ``x[idx]``,
``RuntimeError("[/foo] is missing")``). Given to Rich as a ``str``, they are
read as markup tags: a ``MarkupError`` traceback, or a message with its
brackets eaten and the wrong file named. So every string goes to Rich as a
:class:`rich.text.Text` made here, whose content is never parsed; styles are
given apart from the text. Everything that prints through Rich (the CLI's
messages, the summary card, the compare table, the progress bar) uses these
two functions.

rich is imported only when something is printed: the load and analysis path
must not pay for it (tests/test_lazy_imports.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["plain", "say"]


def plain(text: Any, style: str = "") -> Text:
    """``text`` (any object, as ``str()`` gives it) as literal text for Rich, in ``style``."""
    from rich.text import Text

    if isinstance(text, Text):
        return text
    return Text(str(text), style=style)


def say(console: Console, text: Any, style: str = "") -> None:
    """Print one message, literally, without cutting long names across lines."""
    console.print(plain(text, style), soft_wrap=True)

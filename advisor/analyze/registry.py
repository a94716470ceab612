"""The analyzer contract and registry.

An analyzer is a pure function from a view of the tables to a dict of fact
values. It is declared with :func:`analyzer`, which records:

- ``needs``: the tables it reads (see ``TraceView.has``). When one is absent
  the analyzer is skipped and the reason is kept in ``Findings.skipped``.
- ``provides``: a :class:`FactSpec` for every fact it may return. Returning
  an undeclared fact is a programming error; not returning a declared one
  means "not measurable in this run" (rules reading it are not applicable).

Analyzers have a *scope*, which says what they are given:

- ``"trace"`` (the default): one :class:`~advisor.analyze.framework.view.TraceView`.
  ``run_analyzers(view, stage)`` runs these over one trace (in a multi-rank
  run, over the first rank's).
- ``"ranks"``: a :class:`~advisor.analyze.ranks.rankset.RankSet`, the views of all
  rank traces of one run, to compare ranks: :mod:`advisor.analyze.ranks.host`
  (host side, ``ranks.*``) and :mod:`advisor.analyze.ranks.gpu` (GPU side,
  ``ranks.gpu.*`` and ``comm.*``).
  ``run_analyzers(rank_set, stage, scope="ranks")`` runs these once per run,
  when there are two or more rank traces. ``needs`` works the same way:
  ``RankSet.has("ranks")`` is true with two or more ranks, and any other
  table is present when every rank has it.

``all_specs()`` is what ``advisor facts`` prints and what rule lint checks
fact names against. Each analyzer also records where its function is
(:attr:`Analyzer.code`), so that ``advisor rules explain`` and the reports can
name, for each fact, the code that computed it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from advisor.analyze.findings import FactSpec, Finding, Findings

__all__ = ["SCOPES", "Analyzer", "all_specs", "analyzer", "find", "registered", "run_analyzers"]

#: what an analyzer is given: one trace's view, or the views of all ranks of a run
SCOPES = ("trace", "ranks")


@dataclass(frozen=True)
class Analyzer:
    name: str
    stage: str
    needs: tuple[str, ...]
    provides: tuple[FactSpec, ...]
    func: Callable[[Any], Mapping[str, Any]]
    doc: str
    scope: str = "trace"
    #: the function's module as a path from the package root (``advisor/analyze/framework/step_split.py``),
    #: the line of its declaration there, and its name
    file: str = ""
    line: int = 0
    function: str = ""

    @property
    def code(self) -> str:
        """``advisor/analyze/framework/step_split.py:37 (step_split)``: where the facts are computed."""
        return f"{self.file}:{self.line} ({self.function})"


_REGISTRY: dict[str, Analyzer] = {}


def analyzer(name: str, *, needs: Iterable[str] = (), provides: Iterable[FactSpec], stage: str = "framework",
             scope: str = "trace") -> Callable[[Callable[[Any], Mapping[str, Any]]], Callable[[Any], Mapping[str, Any]]]:
    """Register a function as an analyzer of ``stage``, given a trace view or (``scope="ranks"``) a RankSet."""
    if scope not in SCOPES:
        raise ValueError(f"analyzer {name!r}: scope must be one of {', '.join(SCOPES)}, not {scope!r}")

    def register(func: Callable[[Any], Mapping[str, Any]]) -> Callable[[Any], Mapping[str, Any]]:
        if name in _REGISTRY:
            raise ValueError(f"analyzer {name!r} is registered twice")
        specs = tuple(provides)
        doc = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else ""
        _REGISTRY[name] = Analyzer(name, stage, tuple(needs), specs, func, doc, scope,
                                   file=func.__module__.replace(".", "/") + ".py",
                                   line=func.__code__.co_firstlineno, function=func.__name__)
        return func

    return register


def _load_builtin(stage: str | None = None) -> None:
    # Importing the modules registers their analyzers.
    from advisor.analyze import builtin

    builtin.load(stage)


def registered(stage: str | None = None, scope: str | None = None) -> list[Analyzer]:
    _load_builtin(stage)
    return [a for a in _REGISTRY.values()
            if (stage is None or a.stage == stage) and (scope is None or a.scope == scope)]


def find(name: str) -> Analyzer | None:
    """The analyzer of that name (a finding's ``source``); None for one not registered."""
    if name not in _REGISTRY:  # the stages that ran registered theirs; another stage's are loaded only if asked for
        _load_builtin()
    return _REGISTRY.get(name)


def all_specs() -> dict[str, FactSpec]:
    """Every fact any analyzer provides, by name."""
    out: dict[str, FactSpec] = {}
    for a in registered():
        for spec in a.provides:
            out[spec.name] = spec
    return out


def run_analyzers(view: Any, stage: str = "framework", evidence: str = "", scope: str = "trace",
                  on_progress: Callable[[int, int], None] | None = None, two_cores: bool = False) -> Findings:
    """Run every analyzer of ``stage`` and ``scope`` over ``view`` (a TraceView, or a RankSet for
    ``scope="ranks"``); skip, with the reason, those whose tables are missing.

    ``on_progress(done, total)`` is told, as they run, how many have run. ``two_cores``: a trace's analyzers may
    share the work with a forked child where that pays (:mod:`advisor.analyze.parallel`); the findings are the
    same.
    """
    findings = Findings()
    what = "these traces do" if scope == "ranks" else "this trace does"
    analyzers = registered(stage, scope)
    runnable = []
    for a in analyzers:
        missing = [t for t in a.needs if not view.has(t)]
        if missing:
            findings.skipped[a.name] = f"needs {', '.join(missing)}, which {what} not have"
        else:
            runnable.append(a)
    progress = (lambda done: on_progress(done, len(runnable))) if on_progress is not None else None
    if two_cores and scope == "trace" and len(runnable) > 1:
        from advisor.analyze.parallel import run_on_two_cores, two_cores_pay

        if two_cores_pay(view):
            _warm(view)
            for a, facts in zip(runnable, run_on_two_cores(view, runnable, _facts, progress)):
                _add(findings, a, facts, evidence)
            return findings
    for done, a in enumerate(runnable):
        if progress is not None:
            progress(done)
        _add(findings, a, _facts(a, view), evidence)
    return findings


def _facts(a: Analyzer, view: Any) -> list[tuple[str, Any]]:
    """What analyzer ``a`` says of ``view``; an undeclared fact is a programming error."""
    specs = {s.name for s in a.provides}
    facts = list(a.func(view).items())
    for name, _ in facts:
        if name not in specs:
            raise AssertionError(f"analyzer {a.name} returned undeclared fact {name!r}")
    return facts


def _add(findings: Findings, a: Analyzer, facts: list[tuple[str, Any]], evidence: str) -> None:
    specs = {s.name: s for s in a.provides}
    for name, value in facts:
        if value is not None:
            findings.add(Finding(name, value, specs[name].unit, a.name, evidence))


def _warm(view: Any) -> None:
    """Build the table nearly every analyzer reads before the fork, so that it is built once, not in each process
    (an error here is left for the analyzer that reads it to raise, as in a serial run)."""
    try:
        view.host  # noqa: B018 - a cached property
    except Exception:  # noqa: BLE001
        pass

"""The workflow's own small graph: order, cycles, reach and layers, and the same answers networkx gives."""

from __future__ import annotations

import random

import pytest

from advisor.workflow.dag import Dag


def _graph(edges: list[tuple[str, str]], nodes: list[str] = ()) -> Dag[str]:  # type: ignore[assignment]
    graph: Dag[str] = Dag(nodes)
    for source, target in edges:
        graph.add_edge(source, target, f"{source}->{target}")
    return graph


def test_edges_keep_their_values_and_order() -> None:
    graph = _graph([("framework", "system"), ("framework", "kernel"), ("system", "kernel"), ("kernel", "report")])
    assert graph.nodes == ["framework", "system", "kernel", "report"]
    assert graph.out_edges("framework") == ["framework->system", "framework->kernel"]
    assert graph.in_edges("kernel") == ["framework->kernel", "system->kernel"]
    assert graph.edges() == ["framework->system", "framework->kernel", "system->kernel", "kernel->report"]
    assert (graph.in_degree("kernel"), graph.out_degree("kernel")) == (2, 1)
    assert graph.has_edge("system", "kernel") and not graph.has_edge("kernel", "system")
    graph.add_edge("system", "kernel", "again")  # a second edge between the same nodes replaces the first
    assert graph.edge("system", "kernel") == "again" and len(graph.edges()) == 4


def test_order_and_layers_of_an_acyclic_graph() -> None:
    graph = _graph([("a", "c"), ("b", "c"), ("c", "d"), ("a", "d")], nodes=["b", "a"])
    assert graph.find_cycle() is None and graph.is_acyclic()
    assert graph.topological_order() == ["b", "a", "c", "d"]  # ties in insertion order
    assert graph.topological_order(key=lambda n: n) == ["a", "b", "c", "d"]
    assert graph.generations() == [["b", "a"], ["c"], ["d"]]
    assert graph.descendants("a") == {"c", "d"} and graph.descendants("d") == set()


def test_a_cycle_is_found_and_named_from_where_it_starts() -> None:
    graph = _graph([("framework", "system"), ("system", "kernel"), ("kernel", "system"), ("kernel", "report")])
    assert graph.find_cycle() == ["system", "kernel", "system"]
    assert not graph.is_acyclic()
    with pytest.raises(ValueError):
        graph.topological_order()
    with pytest.raises(ValueError):
        graph.generations()
    assert graph.descendants("kernel") == {"system", "report"}


def test_same_answers_as_networkx_on_random_graphs() -> None:
    nx = pytest.importorskip("networkx")  # no longer a dependency; checked where it is installed
    rng = random.Random(16)
    for _ in range(300):
        names = [f"n{i}" for i in range(rng.randint(1, 8))]
        pairs = [(a, b) for a in names for b in names if a != b and rng.random() < 0.25]
        ours, theirs = Dag(names, pairs), nx.DiGraph()
        theirs.add_nodes_from(names)
        theirs.add_edges_from(pairs)
        assert ours.is_acyclic() == nx.is_directed_acyclic_graph(theirs)
        for name in names:
            assert ours.descendants(name) == nx.descendants(theirs, name)
        if ours.is_acyclic():
            rank = {n: i for i, n in enumerate(names)}
            assert ours.topological_order() == list(nx.lexicographical_topological_sort(theirs, key=rank.get))
            assert [sorted(layer) for layer in ours.generations()] == \
                   [sorted(layer) for layer in nx.topological_generations(theirs)]
        else:
            cycle = ours.find_cycle()
            assert cycle[0] == cycle[-1] and all(ours.has_edge(a, b) for a, b in zip(cycle, cycle[1:]))

"""A small directed graph: named nodes and edges that each carry one value, kept in the order they were added.

The workflow graph has a handful of stages, and the report draws it; all
either needs is adding nodes and edges, the edges in and out of a node, a
cycle if there is one, what a node reaches, and a topological order (ties
broken by a key) or its layers. networkx did this before, but importing it
took about 0.1 s of every ``advisor analyze`` (a tenth of the whole process
on the fixture traces), for graphs of five nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Dag"]

N = TypeVar("N", bound=Hashable)


class Dag(Generic[N]):
    """Nodes and directed edges with a value each; iteration follows insertion order, as networkx's does.

    A second edge between the same two nodes replaces the first's value, as in a ``networkx.DiGraph``.
    """

    def __init__(self, nodes: Iterable[N] = (), edges: Iterable[tuple[N, N]] = ()) -> None:
        self._nodes: dict[N, Any] = {}
        self._out: dict[N, dict[N, Any]] = {}
        self._in: dict[N, dict[N, Any]] = {}
        for node in nodes:
            self.add_node(node)
        for source, target in edges:
            self.add_edge(source, target)

    # building -------------------------------------------------------------
    def add_node(self, node: N, value: Any = None) -> None:
        """Add ``node`` (or set the value of one already there)."""
        if node not in self._nodes:
            self._out[node], self._in[node] = {}, {}
        self._nodes[node] = value

    def add_edge(self, source: N, target: N, value: Any = None) -> None:
        """Add the edge ``source -> target``, adding either node that is not there yet."""
        for node in (source, target):
            if node not in self._nodes:
                self.add_node(node)
        self._out[source][target] = value
        self._in[target][source] = value

    # reading --------------------------------------------------------------
    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def __iter__(self) -> Iterator[N]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> list[N]:
        return list(self._nodes)

    def node(self, node: N) -> Any:
        return self._nodes[node]

    def has_edge(self, source: N, target: N) -> bool:
        return target in self._out.get(source, {})

    def edge(self, source: N, target: N) -> Any:
        return self._out[source][target]

    def out_edges(self, node: N) -> list[Any]:
        """The values of the edges out of ``node``, in the order they were added."""
        return list(self._out[node].values())

    def in_edges(self, node: N) -> list[Any]:
        return list(self._in[node].values())

    def edges(self) -> list[Any]:
        """Every edge's value: node by node in their order, each node's edges out in theirs."""
        return [value for node in self._nodes for value in self._out[node].values()]

    def in_degree(self, node: N) -> int:
        return len(self._in[node])

    def out_degree(self, node: N) -> int:
        return len(self._out[node])

    # walking --------------------------------------------------------------
    def find_cycle(self) -> list[N] | None:
        """A cycle's nodes, the first repeated at the end (``[a, b, a]``), or None when the graph is acyclic.

        A depth-first search from each node in turn, edges in their order: the first cycle met.
        """
        done: set[N] = set()
        for root in self._nodes:
            if root in done:
                continue
            path, on_path = [root], {root}
            branches = [iter(self._out[root])]
            while branches:
                child = next(branches[-1], None)
                if child is None:
                    branches.pop()
                    done.add(path[-1])
                    on_path.discard(path.pop())
                elif child in on_path:
                    return path[path.index(child):] + [child]
                elif child not in done:
                    path.append(child)
                    on_path.add(child)
                    branches.append(iter(self._out[child]))
        return None

    def is_acyclic(self) -> bool:
        return self.find_cycle() is None

    def descendants(self, node: N) -> set[N]:
        """Every node reachable from ``node``, never ``node`` itself (even on a cycle, as networkx says)."""
        seen: set[N] = set()
        todo = list(self._out[node])
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(self._out[current])
        seen.discard(node)
        return seen

    def topological_order(self, key: Callable[[N], Any] | None = None) -> list[N]:
        """Every node after all the nodes with an edge into it; among those ready at once, the smallest
        ``key`` first (insertion order without one). Raises ValueError on a cycle."""
        rank = {node: i for i, node in enumerate(self._nodes)}
        sort_key = key or rank.__getitem__
        waiting = {node: len(sources) for node, sources in self._in.items()}
        ready = [(sort_key(n), rank[n], n) for n, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        order: list[N] = []
        while ready:
            node = heapq.heappop(ready)[2]
            order.append(node)
            for target in self._out[node]:
                waiting[target] -= 1
                if waiting[target] == 0:
                    heapq.heappush(ready, (sort_key(target), rank[target], target))
        if len(order) != len(self._nodes):
            raise ValueError("the graph has a cycle")
        return order

    def generations(self) -> list[list[N]]:
        """The nodes in layers: those with no edge in, then those whose sources are all in earlier layers, ...

        Raises ValueError on a cycle.
        """
        waiting = {node: len(sources) for node, sources in self._in.items()}
        layer = [n for n, count in waiting.items() if count == 0]
        layers: list[list[N]] = []
        while layer:
            layers.append(layer)
            following = []
            for node in layer:
                for target in self._out[node]:
                    waiting[target] -= 1
                    if waiting[target] == 0:
                        following.append(target)
            layer = following
        if sum(len(lay) for lay in layers) != len(self._nodes):
            raise ValueError("the graph has a cycle")
        return layers

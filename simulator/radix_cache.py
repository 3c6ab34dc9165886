"""A radix tree over token ids: the prefix cache, as SGLang's RadixAttention keeps it.

Each node holds a run of token ids (standing for their KV entries). What it reproduces, from
SGLang's ``mem_cache/radix_cache.py`` and the protocol note (§5):

- lookups and insertions work in whole pages (``page_size``); a partial last page is never cached
  or matched;
- a match that ends inside a node splits the node, so the matched prefix is a node of its own that
  a request can lock;
- a running request locks its path (reference counts up to the root); locked tokens cannot be
  evicted; unlocked ones are "evictable" and still count as used KV memory;
- eviction frees the unlocked *leaf* the eviction policy ranks lowest, repeatedly (a parent left
  childless and unlocked becomes a leaf), only when asked to make room. ``lru`` (SGLang's default)
  ranks by last access; ``priority`` (``--radix-eviction-policy priority``, SGLang's
  ``PriorityStrategy`` in ``mem_cache/evict_policy.py``) by ``(priority, last access)``: the lowest
  priority goes first, the least recently used among equals. A node's priority is the highest
  ``priority`` of the requests that inserted through it (a request without one counts as 0; the
  shared half of a split node keeps the priority it had); a lookup never changes it. Lower numbers go
  first whatever the scheduling direction (``--schedule-low-priority-values-first`` does not reach
  the tree);
- ``namespace`` (SGLang's ``extra_key`` / ``cache_salt``) keeps trees apart: different namespaces
  never share a node.

Access times come from a logical clock, not wall time, so eviction order is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Node:
    key: list[int]
    parent: Node | None = None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    #: The highest request priority inserted through this node (--radix-eviction-policy priority).
    priority: int = 0


@dataclass(frozen=True)
class Match:
    """A prefix found in the tree: its length in tokens and the node that ends it."""

    length: int
    node: Node


#: SGLang's choices for --radix-eviction-policy, and those the simulator implements.
EVICTION_POLICIES = ("lru", "lfu", "slru", "priority", "tlru")
IMPLEMENTED_EVICTION_POLICIES = ("lru", "priority")


def unimplemented_policy_message(policy: str) -> str:
    return (
        f"--radix-eviction-policy {policy}: the simulator does not implement this eviction policy "
        f"(it implements {' and '.join(IMPLEMENTED_EVICTION_POLICIES)}; SGLang also has "
        f"{', '.join(p for p in EVICTION_POLICIES if p not in IMPLEMENTED_EVICTION_POLICIES)})"
    )


class RadixCache:
    def __init__(self, *, page_size: int = 1, disabled: bool = False, eviction_policy: str = "lru") -> None:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        if eviction_policy not in IMPLEMENTED_EVICTION_POLICIES:
            raise ValueError(unimplemented_policy_message(eviction_policy))
        self.page_size = page_size
        self.disabled = disabled
        self.eviction_policy = eviction_policy
        self.reset()

    # -- bookkeeping ----------------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the cache (``/flush_cache``). Only valid when nothing is locked."""
        self._roots: dict[str | None, Node] = {}
        self._clock = 0
        self.total_size = 0  # tokens held by all nodes
        self.evictable_size = 0  # of those, tokens in unlocked nodes
        self.evicted_total = 0  # tokens evicted since start (for metrics)

    @property
    def protected_size(self) -> int:
        return self.total_size - self.evictable_size

    def _root(self, namespace: str | None) -> Node:
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = Node(key=[], lock_ref=1)  # roots are never evicted
        return root

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _page_key(self, ids: Sequence[int]) -> tuple[int, ...]:
        return tuple(ids[: self.page_size])

    def _aligned(self, n: int) -> int:
        return n - n % self.page_size

    def _common(self, a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        return self._aligned(n)

    # -- lookup and insertion ---------------------------------------------------------------------

    def match_prefix(self, ids: Sequence[int], namespace: str | None = None) -> Match:
        """The longest cached prefix of ``ids`` (page-aligned). Refreshes access times on the path."""
        root = self._root(namespace)
        if self.disabled:
            return Match(0, root)
        ids = ids[: self._aligned(len(ids))]
        node, matched, now = root, 0, self._tick()
        while matched < len(ids):
            child = node.children.get(self._page_key(ids[matched:]))
            if child is None:
                break
            n = self._common(child.key, ids[matched:])
            if n == 0:
                break
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, matched = child, matched + n
            if n < len(child.key):
                break
        return Match(matched, node)

    def insert(self, ids: Sequence[int], namespace: str | None = None, priority: int = 0) -> int:
        """Add ``ids`` (page-aligned) to the tree; return how many tokens were new.

        Every node on the path takes the larger of its priority and ``priority`` (SGLang's
        ``_insert_helper``), so a prefix shared with a more important request is kept as long as it.
        """
        if self.disabled:
            return 0
        ids = list(ids[: self._aligned(len(ids))])
        node, pos, now = self._root(namespace), 0, self._tick()
        while pos < len(ids):
            child = node.children.get(self._page_key(ids[pos:]))
            if child is None:
                new = Node(key=ids[pos:], parent=node, last_access=now, priority=priority)
                node.children[self._page_key(new.key)] = new
                self.total_size += len(new.key)
                self.evictable_size += len(new.key)
                return len(new.key)
            n = self._common(child.key, ids[pos:])
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            child.priority = max(child.priority, priority)
            node, pos = child, pos + n
        return 0

    def _split(self, child: Node, n: int) -> Node:
        """Cut ``child`` after ``n`` tokens; return the new upper half (same lock, access time and priority)."""
        parent = child.parent
        assert parent is not None  # nosec B101  # an invariant of the simulator's own bookkeeping, not a check on input
        upper = Node(
            key=child.key[:n],
            parent=parent,
            lock_ref=child.lock_ref,
            last_access=child.last_access,
            priority=child.priority,
        )
        parent.children[self._page_key(upper.key)] = upper
        child.key = child.key[n:]
        child.parent = upper
        upper.children[self._page_key(child.key)] = child
        return upper

    # -- locking ----------------------------------------------------------------------------------

    def lock(self, node: Node) -> None:
        """Protect the path from ``node`` to the root against eviction (a running request's prefix)."""
        while node.parent is not None:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node.parent is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, "unlock without lock"  # nosec B101  # an invariant of the simulator's own bookkeeping, not a check on input
            if node.lock_ref == 0:
                self.evictable_size += len(node.key)
            node = node.parent

    # -- eviction ---------------------------------------------------------------------------------

    def _rank(self, node: Node) -> tuple[int, int]:
        """Eviction order, lowest first: SGLang's LRUStrategy or PriorityStrategy."""
        if self.eviction_policy == "priority":
            return (node.priority, node.last_access)
        return (0, node.last_access)

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` by dropping the lowest-ranked unlocked leaves (fewer if not possible)."""
        if num_tokens <= 0:
            return 0
        heap = [(self._rank(leaf), id(leaf), leaf) for leaf in self._leaves() if leaf.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_tokens:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None  # nosec B101  # an invariant of the simulator's own bookkeeping, not a check on input
            del parent.children[self._page_key(leaf.key)]
            freed += len(leaf.key)
            self.total_size -= len(leaf.key)
            self.evictable_size -= len(leaf.key)
            if parent.parent is not None and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (self._rank(parent), id(parent), parent))
        self.evicted_total += freed
        return freed

    def _leaves(self) -> Iterator[Node]:
        for root in self._roots.values():
            stack = list(root.children.values())
            while stack:
                node = stack.pop()
                if node.children:
                    stack.extend(node.children.values())
                else:
                    yield node

    # -- inspection (tests, /server_info) ----------------------------------------------------------

    def sequences(self, namespace: str | None = None) -> list[list[int]]:
        """Every root-to-leaf token sequence stored under ``namespace``."""
        out: list[list[int]] = []
        root = self._roots.get(namespace)
        if root is None:
            return out
        stack: list[tuple[Node, list[int]]] = [(c, c.key) for c in root.children.values()]
        while stack:
            node, path = stack.pop()
            if not node.children:
                out.append(path)
            stack.extend((c, path + c.key) for c in node.children.values())
        return out

    def node_count(self) -> int:
        count = 0
        for root in self._roots.values():
            stack = list(root.children.values())
            while stack:
                node = stack.pop()
                count += 1
                stack.extend(node.children.values())
        return count

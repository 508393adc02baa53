"""HTML's stack of open elements and list of active formatting elements, as html_cost.py
keeps them: each element with the sets it belongs to (its name, the scopes it bounds ...),
each set kept in stack order, so that whether an element is in scope is a comparison of two
places, O(1) however deep the stack."""

from __future__ import annotations

from .html_tags import (
    HEADINGS,
    HTML_POINTS,
    IMPLIED,
    MARKED,
    MATH_TEXT,
    SCOPE,
    SPECIAL,
    TABLE_PARTS,
)


class Element:
    """An element on the stack of open elements: `seq`, its place in the order elements were
    pushed; whether it is still open; its entry among the active formatting elements."""

    __slots__ = ("entry", "groups", "html", "name", "open", "seq", "space")

    def __init__(self, name: str, space: str, seq: int, html: int) -> None:
        self.name, self.space, self.seq = name, space, seq
        self.html = html  # HTML elements at or below it on the stack
        self.open, self.entry = True, None
        self.groups = GROUPS.get((name, space)) or _groups(name, space)


class Entry:
    """An entry of the list of active formatting elements: the element it stands for now
    (a reopened copy replaces it), its name and its attributes as written."""

    __slots__ = ("element", "key", "name")

    def __init__(self, element: Element, key: str) -> None:
        self.element, self.key, self.name = element, key, element.name
        element.entry = self


GROUPS: dict[tuple[str, str], tuple[str, ...]] = {}


def _groups(name: str, space: str) -> tuple[str, ...]:
    """The sets of open elements an element belongs to, each kept in stack order: its name
    ("foreign NAME" for SVG and MathML), the scopes it bounds, "special", the stops of the
    walks of <li> and <dd>, "structure" (a table's parts) and "heading"."""
    if space != "html":
        points = HTML_POINTS if space == "svg" else MATH_TEXT | {"annotation-xml"}
        point = ("scope", "special", "li stop", "dd stop") if name in points else ()
        found = [f"foreign {name}", *point]
    else:
        found = [name]
        found += ["scope"] if name in SCOPE else []
        found += ["table scope"] if name in ("html", "table", "template") else []
        found += ["list scope"] if name in ("ol", "ul") else []
        found += ["button scope"] if name == "button" else []
        found += ["special"] if name in SPECIAL else []
        found += ["li stop"] if name in SPECIAL - {"address", "div", "p", "li"} else []
        found += ["dd stop"] if name in SPECIAL - {"address", "div", "p", "dd", "dt"} else []
        found += ["structure"] if name in TABLE_PARTS | {"table", "template"} else []
        found += ["heading"] if name in HEADINGS else []
    GROUPS[name, space] = tuple(found)
    return GROUPS[name, space]


def seq_of(element: Element) -> int:
    return element.seq


class Stack:
    """The stack of open elements and the list of active formatting elements, and `extra`:
    the elements made that no tag wrote (reopened, implied), counted by `made`."""

    def __init__(self) -> None:
        self.extra = self.seq = 0
        self.form: Element | None = None
        root = Element("html", "html", 0, 1)
        self.stack = [root]
        self.groups: dict[str, list[Element]] = {group: [root] for group in root.groups}
        self.active: list[Entry | None] = []  # None: a marker
        # after each marker, its entries by "name NAME" and by "key NAME ATTRIBUTES"
        self.marked: list[dict[str, list[Entry]]] = [{}]

    # the stack

    def top(self, group: str) -> int:
        """The place of the topmost open element of `group`, -1 for none."""
        found = self.groups.get(group)
        return found[-1].seq if found else -1

    def push(self, name: str, space: str = "html") -> Element:
        self.seq += 1
        below = self.stack[-1]
        element = Element(name, space, self.seq, below.html + (space == "html"))
        self.stack.append(element)
        groups = self.groups
        for group in element.groups:
            if group in groups:
                groups[group].append(element)
            else:
                groups[group] = [element]
        if name in MARKED and space == "html":
            self.active.append(None)
            self.marked.append({})
        return element

    def pop(self) -> Element:
        element = self.stack.pop()
        for group in element.groups:
            self.groups[group].pop()
        element.open = False
        return element

    def pop_to(self, seq: int) -> None:
        """Pop down to the element at place `seq`, that one too."""
        while self.pop().seq > seq:
            pass

    def pop_to_name(self, name: str) -> None:
        """Pop down to the topmost HTML element `name`, that one too, if there is one."""
        found = self.top(name)
        if found > 0:
            self.pop_to(found)

    def remove(self, element: Element) -> None:
        """Take `element` out of the stack wherever it is (the adoption agency, </form>)."""
        self.stack.remove(element)
        for group in element.groups:
            self.groups[group].remove(element)
        element.open = False

    def in_scope(self, name: str, bound: str = "") -> bool:
        """Whether an HTML `name` is open, the topmost element that bounds the scope (or of
        `bound`) not above it (it may be that element)."""
        return self.top(name) >= max(self.top("scope"), self.top(bound) if bound else -1)

    def implied_ends(self, but: str = "") -> None:
        while (top := self.stack[-1]).name in IMPLIED and top.name != but:
            if top.space != "html":
                return
            self.pop()

    def close_p(self) -> None:
        if self.in_scope("p", "button scope"):
            self.implied_ends("p")
            self.pop_to_name("p")

    def close(self, name: str) -> None:
        """Close the topmost cell, caption or template `name`, and its formatting elements."""
        self.pop_to_name(name)
        self.clear_to_marker()

    def close_cell(self, but: str = "") -> None:
        """Close the cell or caption the insertion mode is in (unless it is `but`)."""
        structure = self.groups["structure"][-1].name
        if structure in ("td", "th", "caption") and structure != but:
            self.close(structure)

    def clear_to(self, *names: str) -> None:
        """Pop down to the topmost of `names` (or a template, or the root), not that one."""
        while (top := self.stack[-1]).seq > 0 and top.name not in (*names, "template"):
            self.pop()

    # the list of active formatting elements

    def clear_to_marker(self) -> None:
        while self.active:
            entry = self.active.pop()
            if entry is None:
                self.marked.pop()
                return
            entry.element.entry = None
        self.marked = [{}]

    def listed(self, name: str) -> Entry | None:
        """The last entry named `name` after the last marker."""
        found = self.marked[-1].get(f"name {name}")
        return found[-1] if found else None

    def add_formatting(self, element: Element, key: str) -> None:
        """List `element`, dropping the earliest of three identical entries after the last
        marker (the standard's "Noah's Ark" clause: identical by name and attributes, which
        here must also be written alike, so that more entries are kept, never fewer)."""
        marked = self.marked[-1]
        same = marked.setdefault(f"key {key}", [])
        if len(same) >= 3:
            self.unlist(same[0])
        entry = Entry(element, key)
        self.active.append(entry)
        same.append(entry)
        marked.setdefault(f"name {element.name}", []).append(entry)

    def unlist(self, entry: Entry) -> None:
        self.active.remove(entry)
        self.marked[-1][f"key {entry.key}"].remove(entry)
        self.marked[-1][f"name {entry.name}"].remove(entry)
        entry.element.entry = None

    def reconstruct(self) -> None:
        """Reopen the listed elements closed since the last marker or open entry."""
        active = self.active
        if not active or active[-1] is None or active[-1].element.open:
            return
        at = len(active) - 1
        while at > 0 and (entry := active[at - 1]) is not None and not entry.element.open:
            at -= 1
        for entry in active[at:]:
            entry.element.entry = None
            entry.element = self.push(entry.name)
            entry.element.entry = entry
        self.made(len(active) - at)

    def made(self, count: int) -> None:
        """`count` elements made that no tag wrote."""
        self.extra += count

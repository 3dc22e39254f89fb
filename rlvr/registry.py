"""A tiny name -> object registry.

Advantage estimators, policy losses, aggregation modes, algorithm presets, tasks and rollout
backends are looked up by name; an unknown name fails with the list of valid ones, and with the
closest of them when one is near (`did_you_mean`, used for config keys and choices too). A name that
was retired for another (`rename`) fails with a message naming its replacement. A registry may
hold traits beside each entry (`register(name, traits=...)`, read by `traits(name)` and
`names_where`): what the entry needs or guarantees, declared where it is registered, so that
consumers ask the registry instead of keeping sets of names of their own.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """" (did you mean 'lr'?)" when a choice is close to `name` (difflib's ratio >= 0.6), else ""."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Registry(Generic[T]):
    """Maps names to objects. `register` refuses duplicates; `get` lists valid names on a miss.

    `traits`, when given, is what an entry registered without traits of its own has (e.g. a frozen
    dataclass whose fields all default to "needs nothing"); traits given at registration must be of
    its type.
    """

    def __init__(self, kind: str, traits: Any = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._traits: dict[str, Any] = {}  # name -> the traits it was registered with
        self.default_traits = traits
        self.renamed: dict[str, str] = {}  # retired name -> the name that replaces it

    def rename(self, old: str, new: str) -> None:
        """Retire `old` for `new`: `get(old)`, and a config that names `old`, fail naming `new`."""
        if old in self._items or old in self.renamed:
            raise ValueError(f"{self.kind} {old!r} is already registered")
        self.renamed[old] = new

    def renamed_error(self, name: str) -> str | None:
        """"<kind> 'old' was renamed to 'new'" when `name` is a retired name, else None."""
        new = self.renamed.get(name)
        return None if new is None else f"{self.kind} {name!r} was renamed to {new!r}"

    def register(self, name: str, traits: Any = None) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj, traits)
            return obj

        return decorator

    def add(self, name: str, obj: T, traits: Any = None) -> None:
        if name in self._items or name in self.renamed:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        expected = type(self.default_traits)
        if traits is not None and self.default_traits is not None and not isinstance(traits, expected):
            raise TypeError(f"{self.kind} {name!r}: traits must be a {expected.__name__}, "
                            f"got {type(traits).__name__}")
        self._items[name] = obj
        if traits is not None:
            self._traits[name] = traits

    def remove(self, name: str) -> None:
        """Unregister `name` and its traits (a KeyError listing the valid names when it is not registered)."""
        self.get(name)
        del self._items[name]
        self._traits.pop(name, None)

    def traits(self, name: str) -> Any:
        """The traits `name` was registered with, else the registry's default (a miss fails as `get` does)."""
        self.get(name)
        return self._traits.get(name, self.default_traits)

    def names_where(self, predicate: Callable[[Any], bool]) -> list[str]:
        """The registered names whose traits satisfy `predicate`, sorted (for checks and the messages listing them)."""
        return [name for name in self.names() if predicate(self.traits(name))]

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            if name in self.renamed:
                raise KeyError(f"{self.renamed_error(name)}; use {self.renamed[name]!r}") from None
            valid = ", ".join(sorted(self._items)) or "(none registered)"
            raise KeyError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._items)}; "
                           f"valid choices: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

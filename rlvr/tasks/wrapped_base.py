"""The base task of a task that adds one model-given component to another's (`judge:BASE`, `rm:BASE`).

The wrapper takes BASE's examples, prompts and components, and adds its own component, weighted by
`task.reward_weights.<component>` (default 1). The other weights are given to BASE and applied by the
wrapper too, whatever BASE does with them: a component's weight is the one given, else BASE's own, else 1.
A weight that names no component is an error that lists them.
"""

from __future__ import annotations

from typing import Callable


def wrap_base(name: str, component: str, base: str, *, reward_weights, base_options, use_chat_template, seed,
              build_base: Callable, example: str):
    """(BASE built through `build_base` with its own weights and options, every component's weight: BASE's
    components' and the added one's)."""
    if not base:
        raise ValueError(f"{name}: name the task that gives the examples, as task.name={name}:BASE ({example})")
    if base.partition(":")[0] == name:
        raise ValueError(f"{name}: the base task cannot be a {name} task itself")
    weights = dict(reward_weights or {})
    weight = float(weights.pop(component, 1.0))
    built = build_base(base, reward_weights=weights, options=dict(base_options or {}),
                       use_chat_template=use_chat_template, seed=seed)
    if component in built.component_names:
        raise ValueError(f"{name}: the base task {base!r} already has a component named {component!r}")
    unknown = sorted(set(weights) - set(built.component_names))
    if unknown:
        raise ValueError(f"{name}:{base}: task.reward_weights names no component {unknown[0]!r}; the components: "
                         f"{', '.join((*built.component_names, component))}")
    own = getattr(built, "weights", None) or {}
    return built, {**{c: float(weights.get(c, own.get(c, 1.0))) for c in built.component_names}, component: weight}

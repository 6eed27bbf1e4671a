"""Helpers shared by the zoo architectures: option checks, family options, classifier heads, naming.

Naming rule that makes weight sharing safe: a parameter name identifies one tensor *shape* too. Whenever an
option changes the shape of a layer (classes, width, head width, flattened feature size), the layer's name
carries a tag (``fc_512x10``, ``w0.5.features...``), so two builds with the same seed never hold different
tensors under one name; kept layers keep their names, hence their bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from sbrs.errors import InputError
from sbrs.zoo.builder import GraphBuilder


def tag(name: str, dims: Sequence[int], default_dims: Sequence[int]) -> str:
    """``name`` when ``dims`` are the default ones, else ``name_AxB``: one name, one shape."""
    if tuple(dims) == tuple(default_dims):
        return name
    return f"{name}_{'x'.join(str(d) for d in dims)}"


def scope_for_width(width: float, default: float = 1.0) -> str:
    """Name prefix of every layer of a width-scaled model (empty at the default width)."""
    return "" if width == default else f"w{width:g}."


def check_positive(value: int | float, option: str, *, minimum: int | float = 1) -> None:
    """Refuse a size option below ``minimum`` with an InputError naming the option."""
    if value < minimum:
        raise InputError(f"must be at least {minimum}, got {value}", field=option)


def check_drop_blocks(
    drop_blocks: Sequence[int], droppable: Sequence[int], total: int, present: int | None = None
) -> frozenset[int]:
    """Validate ``drop_blocks`` against the blocks that may be skipped (identity shortcut, same shape).

    ``total`` is the number of blocks of the full model; ``present`` how many exist before an early exit.
    """
    present = total if present is None else present
    chosen: set[int] = set()
    allowed = ", ".join(str(i) for i in droppable if i < present) or "none"
    for block in drop_blocks:
        if not 0 <= block < total:
            raise InputError(
                f"block {block} does not exist (blocks are 0..{total - 1}); droppable: {allowed}",
                field="drop_blocks",
            )
        if block >= present:
            raise InputError(
                f"block {block} lies after the early exit; droppable: {allowed}", field="drop_blocks"
            )
        if block not in droppable:
            raise InputError(
                f"block {block} has no identity shortcut and cannot be dropped; droppable: {allowed}",
                field="drop_blocks",
            )
        if block in chosen:
            raise InputError(f"block {block} is listed twice", field="drop_blocks")
        chosen.add(block)
    return frozenset(chosen)


def check_exit_stage(exit_stage: int | None, stages: int) -> int:
    """Validate an early exit (after stage 1..stages-1); None means the full model. Returns the last stage."""
    if exit_stage is None:
        return stages
    if not 1 <= exit_stage < stages:
        raise InputError(
            f"must be between 1 and {stages - 1} (the full model has {stages} stages), got {exit_stage}",
            field="exit_stage",
        )
    return exit_stage


def classifier_head(
    b: GraphBuilder,
    x: str,
    *,
    classes: int,
    head_width: int,
    default_in: int,
    default_classes: int,
    exit_stage: int | None,
    scope: str = "",
    name: str = "fc",
    hidden_act: str = "relu",
) -> str:
    """Global average pool → flatten → [hidden FC + activation] → classifier FC.

    The full model's classifier is ``{scope}{name}``; an early exit's head lives under ``exit{k}.``, and a
    hidden layer of width ``head_width`` under ``hidden{head_width}``; names are tagged whenever the shape
    differs from the base model's classifier.
    """
    check_positive(classes, "classes")
    check_positive(head_width, "head_width", minimum=0)
    pooled = b.flatten(b.global_avgpool(x, name=f"{scope}{name}.pool"), name=f"{scope}{name}.flatten")
    prefix = scope if exit_stage is None else f"{scope}exit{exit_stage}."
    features = b.channels(x)
    natural_in = default_in if exit_stage is None else features
    if head_width:
        hidden_name = f"{prefix}hidden{head_width}"
        hidden = b.gemm(pooled, head_width, name=hidden_name, gain=2.0)
        pooled = b.activation(hidden, hidden_act, name=f"{hidden_name}.act")
        return b.gemm(
            pooled,
            classes,
            name=tag(f"{hidden_name}.{name}", (head_width, classes), (head_width, default_classes)),
        )
    return b.gemm(
        pooled, classes, name=tag(f"{prefix}{name}", (features, classes), (natural_in, default_classes))
    )


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's ``_make_divisible``: round channels to a multiple of ``divisor``, at most 10 % down."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new

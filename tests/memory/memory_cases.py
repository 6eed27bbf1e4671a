"""Hand-built memory problems shared by the memory tests (realistic CNN lifetimes and sizes)."""

from __future__ import annotations

from sbrs.memory import Block, Live, Problem, lifetimes_from_schedule, merge_blocks

Step = tuple[str, list[str], list[str]]

# -- thesis Section 6.4, Figure 6.1 and Table 6.1 ------------------------------------------------------

# Table 6.1 (naive buffers B_1..B_9): edge -> size in tokens, in the table's (= Algorithm 8's visiting) order.
# The table's sizes add up to 51466; the prose next to Table 6.2 says "51446 * token_size", which must be a
# transposition typo (no single size in the table can change by 20 and keep Table 6.2's 8192/8192/8192/10).
TABLE_6_1: dict[str, int] = {
    "e12^1": 3072,
    "e23^1": 8192,
    "e24^1": 8192,
    "e34^1": 8192,
    "e45^1": 8192,
    "e12^2": 3072,
    "e23^2(1)": 6272,
    "e23^2(2)": 6272,
    "e34^2": 10,
}

# schedule_1 = {{l1^1},...,{l5^1}}; CNN^1 edges e12, e23, e24, e34, e45 (Figure 6.1: l2 feeds l3 and l4).
SCHEDULE_1: list[Step] = [
    ("l1^1", [], ["e12^1"]),
    ("l2^1", ["e12^1"], ["e23^1", "e24^1"]),
    ("l3^1", ["e23^1"], ["e34^1"]),
    ("l4^1", ["e24^1", "e34^1"], ["e45^1"]),
    ("l5^1", ["e45^1"], []),
]
# schedule_2 = {{l1^2},{l2^2}} (partition P2), schedule_3 = {{l3^2},{l4^2}} (partition P3); the two edges
# e23^2(1), e23^2(2) cross from P2 to P3: live from l2^2 to the end of P2 and from the start of P3 to l3^2.
SCHEDULE_2: list[Step] = [("l1^2", [], ["e12^2"]), ("l2^2", ["e12^2"], ["e23^2(1)", "e23^2(2)"])]
SCHEDULE_3: list[Step] = [("l3^2", ["e23^2(1)", "e23^2(2)"], ["e34^2"]), ("l4^2", ["e34^2"], [])]
J = frozenset({frozenset({"P2", "P3"})})


def thesis_app() -> Problem:
    """APP = ({CNN^1, CNN^2}, B^naive, {P1, P2, P3}, {{P2, P3}}, {schedule_1, schedule_2, schedule_3})."""
    blocks = (lifetimes_from_schedule("P1", SCHEDULE_1, TABLE_6_1)
              + lifetimes_from_schedule("P2", SCHEDULE_2, TABLE_6_1)
              + lifetimes_from_schedule("P3", SCHEDULE_3, TABLE_6_1))
    return Problem(tuple(merge_blocks(blocks)), J, alignment=1)


def thesis_app_explicit() -> Problem:
    """The same application written out by hand with the thesis' 1-based steps (e23^1 is [2,3], e24^1 [2,4])."""
    s = TABLE_6_1
    return Problem((
        Block("e12^1", s["e12^1"], (Live("P1", 1, 2),)),
        Block("e23^1", s["e23^1"], (Live("P1", 2, 3),)),
        Block("e24^1", s["e24^1"], (Live("P1", 2, 4),)),
        Block("e34^1", s["e34^1"], (Live("P1", 3, 4),)),
        Block("e45^1", s["e45^1"], (Live("P1", 4, 5),)),
        Block("e12^2", s["e12^2"], (Live("P2", 1, 2),)),
        Block("e23^2(1)", s["e23^2(1)"], (Live("P2", 2, 2), Live("P3", 1, 1))),
        Block("e23^2(2)", s["e23^2(2)"], (Live("P2", 2, 2), Live("P3", 1, 1))),
        Block("e34^2", s["e34^2"], (Live("P3", 1, 2),)),
    ), J, alignment=1)


# -- small graphs with a known optimum ------------------------------------------------------------------


def chain(timeline: str = "s", sizes: tuple[int, ...] = (602112, 1605632, 802816, 401408, 4000)) -> Problem:
    """x0 -> l1 -> x1 -> ... : only consecutive tensors are live together."""
    steps: list[Step] = [(f"l{k}", [f"x{k}"], [f"x{k + 1}"]) for k in range(len(sizes) - 1)]
    return Problem(tuple(lifetimes_from_schedule(timeline, steps, {f"x{k}": v for k, v in enumerate(sizes)})))


def diamond() -> Problem:
    """a -> (b, c) -> d: b and c are both live while d runs."""
    steps: list[Step] = [("l0", ["in"], ["a"]), ("l1", ["a"], ["b"]), ("l2", ["a"], ["c"]),
                         ("l3", ["b", "c"], ["d"]), ("l4", ["d"], ["out"])]
    sizes = {"in": 150528, "a": 401408, "b": 200704, "c": 300000, "d": 401408, "out": 4000}
    return Problem(tuple(lifetimes_from_schedule("s", steps, sizes)))


def residual() -> Problem:
    """ResNet basic block: x -> conv -> relu -> conv -> add(x) -> relu."""
    steps: list[Step] = [("conv1", ["x"], ["h1"]), ("relu1", ["h1"], ["h2"]), ("conv2", ["h2"], ["h3"]),
                         ("add", ["h3", "x"], ["h4"]), ("relu2", ["h4"], ["y"])]
    n = 64 * 56 * 56 * 4
    sizes = {"x": n, "h1": n, "h2": n, "h3": n, "h4": n, "y": n}
    return Problem(tuple(lifetimes_from_schedule("s", steps, sizes)))


def mobilenet_v2_steps(prefix: str = "", width: float = 1.0, res: int = 224,
                       elem: int = 4) -> tuple[list[Step], dict[str, int]]:
    """MobileNetV2 (Sandler et al. 2018) as a layer schedule with float32 tensor sizes.

    Inverted residual blocks (expand 1x1, depthwise 3x3, project 1x1, optional residual add) with the
    reference (t, c, n, s) table; fused activations; ~65 steps, ~70 tensors.
    """
    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    steps: list[Step] = []
    sizes: dict[str, int] = {}
    count = 0

    def layer(name: str, inputs: list[str], c: int, hw: int) -> str:
        nonlocal count
        out = f"{prefix}t{count}"
        count += 1
        sizes[out] = c * hw * hw * elem
        steps.append((f"{prefix}{name}{count}", inputs, [out]))
        return out

    x = f"{prefix}input"
    sizes[x] = 3 * res * res * elem
    hw = res // 2
    cin = ch(32)
    x = layer("conv", [x], cin, hw)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        cout = ch(c)
        for k in range(n):
            stride = s if k == 0 else 1
            h = x
            if t != 1:
                h = layer("expand", [h], cin * t, hw)
            hw_out = hw // stride
            h = layer("dw", [h], cin * t, hw_out)
            h = layer("project", [h], cout, hw_out)
            if stride == 1 and cin == cout:
                h = layer("add", [h, x], cout, hw_out)
            x, cin, hw = h, cout, hw_out
    x = layer("conv", [x], 1280, hw)
    x = layer("pool", [x], 1280, 1)
    layer("fc", [x], 1000, 1)
    return steps, sizes


def mobilenet_v2(width: float = 1.0, timeline: str = "mnv2") -> Problem:
    """One MobileNetV2 scenario, 64-byte alignment."""
    steps, sizes = mobilenet_v2_steps(width=width)
    return Problem(tuple(lifetimes_from_schedule(timeline, steps, sizes)))


def two_scenarios_shared_stem() -> Problem:
    """Two MobileNetV2 widths as two scenarios sharing the input tensor (one block with two Lives)."""
    big_steps, big_sizes = mobilenet_v2_steps(prefix="a.", width=1.0)
    small_steps, small_sizes = mobilenet_v2_steps(prefix="b.", width=0.5, res=160)
    # scenario b reads scenario a's input tensor: one block live on both timelines
    shared_steps = [(name, [i.replace("b.input", "a.input") for i in ins], outs)
                    for name, ins, outs in small_steps]
    sizes = {**big_sizes, **small_sizes}
    blocks = (lifetimes_from_schedule("a", big_steps, sizes) + lifetimes_from_schedule("b", shared_steps, sizes))
    return Problem(tuple(merge_blocks(blocks)))


def five_cycle(size: int = 64) -> Problem:
    """Conflicts A-B-C-D-E-A only (each pair on its own timeline): cliques hold 2 blocks, the optimum 3."""
    names = "ABCDE"
    lives: dict[str, list[Live]] = {n: [] for n in names}
    for k in range(5):
        a, b = names[k], names[(k + 1) % 5]
        lives[a].append(Live(f"t{k}", 0, 0))
        lives[b].append(Live(f"t{k}", 0, 0))
    return Problem(tuple(Block(n, size, tuple(lives[n])) for n in names))

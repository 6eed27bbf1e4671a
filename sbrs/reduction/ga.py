"""Buffers reduction: thesis Algorithm 9 (multi-objective GA) over Algorithm 10 (derivation with phases).

Algorithm 10 (:func:`plan_reduction`): for every scenario, the band heights give the phases (Equation 6.1,
generalised from a 0/1 gene to a band height), Algorithm 4 gives the CSDF graph (line 4), the simulation of
:mod:`sbrs.reduction.schedule` gives minimum buffers and a schedule in place of SDF3 (line 5), and the
reduced buffers of all scenarios, one timeline each, are planned into one arena (lines 8-9; the arena
planner of :mod:`sbrs.memory` includes Algorithm 8's layout as a candidate and is never larger).

Algorithm 9 (:func:`reduce_buffers`):

- lines 1-5: if the application without processing by parts (whole tensors, arena reuse) fits the memory
  limit ``M^c``, return it at once with every ``Φ_i = 1`` (``early_exit``);
- lines 6-8: an NSGA-II search (``deap.tools.selNSGA2`` for survival) over chromosomes with one gene per
  row-local layer taller than one row of every scenario; a gene picks the layer's band height from
  ``GaParams.candidates`` (0 = whole height; values clipped to the height, duplicates dropped). Objectives:
  minimise memory (Eq. 2.5: unique parameters + the reduced arena) and maximise every scenario's fps under a
  :class:`~sbrs.reduction.cost.CostModel`. Variation is the thesis' (Section 2.6): two-parent one-point
  crossover and single-gene mutation; parents by binary tournament on (front rank, crowding distance);
- lines 9-16: from the Pareto front of every configuration evaluated, the set ``S`` meeting ``M^c`` and all
  ``T^c_n``; the chosen one is the *fastest* member of ``S`` (line 14; ties: less memory), else the front
  member with minimal memory (line 16), and the result lists which constraints it fails (``violations``).
  Deviation from line 14, which takes the member of ``S`` with minimal memory: every member of ``S`` fits the
  limit the app asked for, and the smallest is typically the slowest by far (MobileNetV2: the smallest
  reachable configuration runs at a quarter of the speed of one 1.6 MB larger), so an app that sets
  ``memory_limit_mb`` would run slower than it has to. "Fastest" is the highest worst-case speed relative
  to the unreduced configuration over the scenarios (the modelled fps of each divided by its unreduced fps).

Models: both algorithms work on the scenarios with conv→BN→activation folded into one layer
(:func:`sbrs.model.fold.fold_model`, what ONNX Runtime runs and what thesis Table 2.1 counts), so parameters,
genes, buffers and band heights (``band_rows``, keyed by the folded layers' names: a convolution keeps its
name) are those of the folded models.

Reproducibility: every random choice comes from one ``random.Random(seed)`` owned by the call (deap's own
variation operators draw from the global ``random`` module, so they are not used); deap's non-dominated
sorting and crowding distance are deterministic. The initial population holds the whole-height and the
1-row configurations, one "threshold" configuration per distinct layer height ``h`` (1-row bands in every
layer at least ``h`` rows high, whole below: reduce the big early layers, run the small late ones whole),
then random chromosomes.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deap import base, tools

from sbrs.errors import InputError
from sbrs.memory import ArenaPlan, Problem, place, plan_arena
from sbrs.model.cnn import INPUT_OP, CnnModel, params_bytes
from sbrs.model.fold import FoldMemo, fold_bands, fold_cuts, fold_model, fold_tiles
from sbrs.reduction.cost import AnalyticCostModel, CostModel, config_seconds, streams_gain
from sbrs.reduction.csdf import CsdfGraph, cnn_to_csdf
from sbrs.reduction.phases import full_bands, normalize_bands, phases_of
from sbrs.reduction.rows import ROWWISE_OPS, is_row_local, layer_height, layer_row_maps, row_bytes
from sbrs.reduction.schedule import Schedule, reduced_problem, schedule_csdf
from sbrs.reduction.tiles import tile_groups

__all__ = [
    "GaParams",
    "Gene",
    "Point",
    "ReductionPlan",
    "ReductionResult",
    "cut_genes",
    "plan_reduction",
    "reduce_buffers",
    "reduction_genes",
    "tile_genes",
]

Scenarios = Mapping[str, CnnModel] | Sequence[CnnModel]
Progress = Callable[[int, int], None]



def _mb(nbytes: int) -> str:
    """Bytes as the megabytes users give limits in (1 MB = 10^6 bytes)."""
    return f"{nbytes / 1e6:.6g} MB"

def _folded(models: Mapping[str, CnnModel]) -> dict[str, CnnModel]:
    """Every model with conv→BN→activation folded into one layer (``sbrs.model.fold``; idempotent)."""
    memo: FoldMemo = {}  # weights several scenarios share are folded once
    return {s: fold_model(m, memo=memo) for s, m in models.items()}


def refuse_below_weights(models: Mapping[str, CnnModel], memory_limit: int | None) -> None:
    """Raise ``InputError`` where ``memory_limit`` is below the weights of ``models`` (folded, as the search holds
    them) alone: every band configuration holds every weight (a ``Point``'s parameters are the same for all), so
    no search can reach such a limit, and saying so before any cost is measured or configuration evaluated saves
    the whole search."""
    if memory_limit is None:
        return
    weights = params_bytes(models.values())
    if weights > memory_limit:
        raise InputError(f"memory limit {_mb(memory_limit)} is below the smallest memory reachable: the weights "
                         f"alone take {_mb(weights)} ({weights} bytes), which every band configuration holds",
                         field="memory_limit_mb")


def _scenarios(scenarios: Scenarios) -> dict[str, CnnModel]:
    if isinstance(scenarios, Mapping):
        result = dict(scenarios)
    else:
        result = {}
        for model in scenarios:
            if model.name in result:
                raise InputError(f"two scenarios are called '{model.name}'; pass a mapping name -> model",
                                 field="scenarios")
            result[model.name] = model
    if not result:
        raise InputError("no scenario to reduce", field="scenarios")
    return result


# -- Algorithm 10 ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReductionPlan:
    """Algorithm 10's output for one band configuration: per scenario the CSDF graph and schedule, the
    reduced memory problem (one timeline per scenario) and its arena, and the figures."""

    bands: dict[str, dict[str, int]]
    graphs: dict[str, CsdfGraph]
    schedules: dict[str, Schedule]
    problem: Problem
    arena: ArenaPlan
    params_bytes: int
    fps: dict[str, float]
    cuts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def memory_bytes(self) -> int:
        """Thesis Eq. 2.5: parameters plus the reduced buffers as planned in the arena."""
        return self.params_bytes + self.arena.arena_bytes

    @property
    def phases(self) -> dict[str, dict[str, int]]:
        """``Φ`` of every layer of every scenario."""
        return {s: graph.phases for s, graph in self.graphs.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: phases, bands, buffers, firings and offsets (the CSDF graphs via ``graphs``)."""
        return {
            "memory_bytes": self.memory_bytes,
            "params_bytes": self.params_bytes,
            "arena_bytes": self.arena.arena_bytes,
            "fps": dict(self.fps),
            "phases": self.phases,
            "band_rows": {s: dict(b) for s, b in self.bands.items()},
            "cuts": {s: list(c) for s, c in self.cuts.items()},
            "schedules": {s: sched.to_dict() for s, sched in self.schedules.items()},
            "arena": self.arena.to_dict(),
        }

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


def plan_reduction(scenarios: Scenarios, band_rows: Mapping[str, Mapping[str, int]] | None = None, *,
                   cost: CostModel | None = None, alignment: int = 64,
                   cuts: Mapping[str, Sequence[str]] | None = None,
                   tiles: Mapping[str, Sequence[tuple[Sequence[str], int]]] | None = None) -> ReductionPlan:
    """Thesis Algorithm 10 for explicit band heights ``band_rows[scenario][layer]`` (missing: whole height).

    Lines 2-7: phases, CSDF graph and minimum buffers with a schedule per scenario; lines 8-10: the reduced
    buffers of every scenario in one arena (``sbrs.memory.place`` over :func:`reduced_problem`). ``cuts[scenario]``
    partitions a scenario at those tensors (:class:`~sbrs.reduction.csdf.CsdfGraph`): each partition's line
    buffers live only while it runs, so the arena reuses them across partitions (lines 2-9). ``tiles[scenario]``:
    ``(layers, band_rows)`` groups fired as one actor each (the receptive-field tiling of Zhuang et al. 2023,
    :mod:`sbrs.reduction.tiles`).
    """
    given = _scenarios(scenarios)
    models = _folded(given)
    band_rows = band_rows or {}
    unknown = sorted(set(band_rows) - set(models))
    if unknown:
        raise InputError(f"unknown scenario(s) {', '.join(unknown)}", field="band_rows")
    cost = cost or AnalyticCostModel()
    cuts = cuts or {}
    tiles = tiles or {}
    unknown = sorted((set(cuts) | set(tiles)) - set(models))
    if unknown:
        raise InputError(f"unknown scenario(s) {', '.join(unknown)}", field="cuts")
    bands = {s: normalize_bands(m, fold_bands(given[s], m, band_rows.get(s, {}))) for s, m in models.items()}
    graphs = {s: cnn_to_csdf(m, bands[s], name=s, cuts=fold_cuts(given[s], m, cuts.get(s, ())),
                             tiles=fold_tiles(given[s], m, tiles.get(s, ())))
              for s, m in models.items()}
    schedules = {s: schedule_csdf(g) for s, g in graphs.items()}
    problem = reduced_problem(schedules.values(), alignment=alignment)
    fps = {s: 1.0 / max(config_seconds(m, bands[s], graphs[s].tiles, cost), 1e-12) for s, m in models.items()}
    arena = place(problem, what="the reduced buffers (Algorithm 10) of " + ", ".join(models))
    return ReductionPlan(bands, graphs, schedules, problem, arena, params_bytes(models.values()), fps,
                         {s: g.cuts for s, g in graphs.items() if g.cuts})


# -- Algorithm 9 --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GaParams:
    """GA parameters (thesis ``GA_par``). ``candidates``: band heights a gene may take, 0 = whole height.

    ``mutation`` is the probability that an offspring gets one single-gene mutation; ``crossover`` that a
    pair of parents is recombined. ``threshold_seeds`` adds the per-height threshold chromosomes to the
    initial population (see the module docstring). ``tie_followers`` gives an element-wise layer that reads
    the rows of one row-local producer 1:1 (BatchNormalization, activations, the Add of a residual) its
    producer's gene instead of its own (:func:`reduction_genes`). ``cuts`` adds one gene per tensor where a
    scenario may be partitioned (:func:`cut_genes`): 0 = no cut, 1 = cut. ``tiles`` adds one gene per
    candidate tile group (:func:`tile_genes`, the strategy of Zhuang et al. 2023): 0 = its layers keep their own
    genes, else the group's exit band. ``time_budget_s`` stops the search after the generation that passes it.
    """

    population: int = 24
    generations: int = 16
    crossover: float = 0.9
    mutation: float = 0.5
    candidates: tuple[int, ...] = (0, 32, 16, 8, 4, 2, 1)
    seed: int = 0
    threshold_seeds: bool = True
    tie_followers: bool = True
    cuts: bool = True
    tiles: bool = True
    time_budget_s: float | None = None


@dataclass(frozen=True)
class Gene:
    """One gene: the band height of ``layer`` in ``scenario``, one of ``choices`` (``choices[0]`` = whole).

    ``followers`` take the same band (tied element-wise layers, see :func:`reduction_genes`).
    """

    scenario: str
    layer: str
    height: int
    choices: tuple[int, ...]
    followers: tuple[str, ...] = ()
    kind: str = "band"
    group: tuple[str, ...] = ()

    @property
    def layers(self) -> tuple[str, ...]:
        """The layer and its followers: every layer this gene sets (none for a cut gene)."""
        return (self.layer, *self.followers) if self.kind == "band" else ()


def tile_genes(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates) -> tuple[Gene, ...]:
    """One gene per candidate tile group (:func:`~sbrs.reduction.tiles.tile_groups`; ``kind="tile"``,
    ``layer`` = its exit layer, ``group`` = its layers): ``choices[0] = 0`` leaves the group's layers to their
    own genes, the others are exit bands below the exit's height (the strategy and size per region)."""
    genes: list[Gene] = []
    for scenario, model in models.items():
        for group in tile_groups(model):
            height = layer_height(model.layer(group[-1]))
            bands = sorted({min(int(c), height) for c in candidates if 0 < int(c) < height}, reverse=True)
            if bands:
                genes.append(Gene(scenario, group[-1], height, (0, *bands), (), "tile", tuple(group)))
    return tuple(genes)


def cut_genes(models: Mapping[str, CnnModel]) -> tuple[Gene, ...]:
    """One gene per tensor where a scenario may be partitioned (``kind="cut"``, ``layer`` = the tensor,
    ``choices = (0, 1)``): the output of a row-local layer taller than one row, read only by row-local
    layers, not a graph output, and no wider per row than the widest input of its producer (a cut holds its
    tensor whole, which pays where the CNN narrows: the projections and residual sums of MobileNetV2).
    """
    genes: list[Gene] = []
    for scenario, model in models.items():
        readers: dict[str, list[str]] = {}
        for layer in model.layers:
            for t in dict.fromkeys(layer.inputs):
                readers.setdefault(t, []).append(layer.name)
        local = {layer.name: is_row_local(model, layer) and layer.op != INPUT_OP for layer in model.layers}
        for layer in model.layers:
            if not local[layer.name] or len(layer.outputs) != 1:
                continue
            tensor = layer.outputs[0]
            users = readers.get(tensor, [])
            if not users or tensor in model.graph_outputs or not all(local[u] for u in users):
                continue
            widest = max((row_bytes(model.tensors[t]) for t in layer.inputs), default=0)
            if row_bytes(model.tensors[tensor]) > widest:
                continue
            genes.append(Gene(scenario, tensor, layer_height(layer), (0, 1), (), "cut"))
    return tuple(genes)


def reduction_genes(models: Mapping[str, CnnModel], candidates: Sequence[int] = GaParams.candidates, *,
                    stream_input: bool = False, tie_followers: bool = False) -> tuple[Gene, ...]:
    """Algorithm 9, line 6, generalised: one gene per row-local layer taller than one row of every scenario.

    ``tie_followers``: an element-wise layer (:data:`~sbrs.reduction.rows.ROWWISE_OPS`) whose inputs are all
    read 1:1 and whose latest-produced input comes from a row-local layer of the same height follows that
    layer's gene (transitively). Such a layer can only be fused into its producer's band call by an executor
    when both have the same band (``sbrs.compile.parts``); an independent gene mostly yields unfused, slower
    configurations and a larger search space for no memory gain.
    """
    genes: list[Gene] = []
    for scenario, model in models.items():
        producer = {t: layer for layer in model.layers for t in layer.outputs if t}
        position = {layer.name: i for i, layer in enumerate(model.layers)}
        root: dict[str, str] = {}
        own: list[tuple[str, int, tuple[int, ...]]] = []
        for layer in model.layers:
            if layer.op == INPUT_OP and not stream_input:
                continue
            if not is_row_local(model, layer):
                continue
            height = layer_height(layer)
            choices = tuple(dict.fromkeys([height, *(height if c <= 0 else min(int(c), height) for c in candidates)]))
            if len(choices) <= 1:
                continue
            if tie_followers and layer.op in ROWWISE_OPS:
                maps = layer_row_maps(model, layer)
                sources = [producer[t] for t in layer.inputs if t in producer and maps[t].kind == "window"]
                if sources and all(m.kind != "whole" for m in maps.values()):
                    source = max(sources, key=lambda s: position[s.name])
                    if source.name in root and layer_height(source) == height:
                        root[layer.name] = root[source.name]
                        continue
            root[layer.name] = layer.name
            own.append((layer.name, height, choices))
        followers: dict[str, list[str]] = {}
        for name, head in root.items():
            if name != head:
                followers.setdefault(head, []).append(name)
        genes.extend(Gene(scenario, name, height, choices, tuple(followers.get(name, ())))
                     for name, height, choices in own)
    return tuple(genes)


@dataclass(frozen=True)
class Point:
    """One evaluated configuration: memory (Eq. 2.5), fps per scenario, and the layers processed by parts
    (``band_rows[scenario][layer]`` for every layer whose band is below its height)."""

    memory_bytes: int
    params_bytes: int
    arena_bytes: int
    fps: dict[str, float]
    band_rows: dict[str, dict[str, int]] = field(default_factory=dict)
    cuts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tiles: dict[str, tuple[tuple[tuple[str, ...], int], ...]] = field(default_factory=dict)
    #: Frames in flight at once, each with buffers of its own (``arena_bytes`` is the buffers of all of them):
    #: :func:`with_streams`.
    streams: int = 1

    def meets(self, memory_limit: int | None, min_fps: Mapping[str, float]) -> bool:
        """Algorithm 9, line 11: ``M <= M^c`` and ``T_n >= T^c_n`` for every scenario."""
        if memory_limit is not None and self.memory_bytes > memory_limit:
            return False
        return all(self.fps.get(s, 0.0) >= need for s, need in min_fps.items())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary."""
        return {"memory_bytes": self.memory_bytes, "params_bytes": self.params_bytes,
                "arena_bytes": self.arena_bytes, "fps": dict(self.fps),
                "band_rows": {s: dict(b) for s, b in self.band_rows.items()},
                "cuts": {s: list(c) for s, c in self.cuts.items()},
                "tiles": {s: [[list(g), b] for g, b in t] for s, t in self.tiles.items()},
                "streams": self.streams}


def with_streams(point: Point, streams: int, gain: float) -> Point:
    """``point`` run as ``streams`` band streams: that many frames in flight at once, one per core, each on
    buffers of its own and every stream on the same weights. Memory: the parameters once and the buffers
    ``streams`` times; fps: the one-stream figure times ``gain``, the throughput the cores add
    (:func:`sbrs.reduction.cost.streams_gain`). Beyond the thesis, which pipelines the partitions of one frame
    over processors (ch. 3, Algorithm 2): frames of their own need no buffer between the processors and no
    balance between partitions, and they cost the buffers once more."""
    return Point(point.params_bytes + streams * point.arena_bytes, point.params_bytes, streams * point.arena_bytes,
                 {s: fps * gain for s, fps in point.fps.items()}, point.band_rows, point.cuts, point.tiles, streams)


@dataclass(frozen=True)
class ReductionResult:
    """Algorithm 9's result: the chosen configuration, the Pareto front, and how the constraints fare.

    ``phases`` and ``band_rows`` cover every layer of every scenario (``Φ``; Algorithm 9, line 18).
    ``violations`` is empty when the chosen configuration meets ``M^c`` and every ``T^c_n``; otherwise one
    line per failing constraint. ``early_exit``: lines 1-5 applied (no processing by parts needed).
    """

    early_exit: bool
    feasible: bool
    violations: tuple[str, ...]
    memory_limit: int | None
    min_fps: dict[str, float]
    unreduced: Point
    chosen: Point
    pareto: tuple[Point, ...]
    phases: dict[str, dict[str, int]]
    band_rows: dict[str, dict[str, int]]
    evaluations: int
    generations: int
    seed: int
    cuts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    tiles: dict[str, tuple[tuple[tuple[str, ...], int], ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dictionary (``phases``, ``band_rows``, ``pareto``, ``chosen`` and the rest)."""
        return {
            "phases": {s: dict(p) for s, p in self.phases.items()},
            "band_rows": {s: dict(b) for s, b in self.band_rows.items()},
            "cuts": {s: list(c) for s, c in self.cuts.items()},
            "tiles": {s: [[list(g), b] for g, b in t] for s, t in self.tiles.items()},
            "pareto": [p.to_dict() for p in self.pareto],
            "chosen": self.chosen.to_dict(),
            "unreduced": self.unreduced.to_dict(),
            "early_exit": self.early_exit,
            "feasible": self.feasible,
            "violations": list(self.violations),
            "memory_limit": self.memory_limit,
            "min_fps": dict(self.min_fps),
            "evaluations": self.evaluations,
            "generations": self.generations,
            "seed": self.seed,
        }

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), sort_keys=True)


class _Individual:
    """A chromosome with a deap fitness (what ``deap.tools.selNSGA2`` needs)."""

    __slots__ = ("fitness", "genes")

    def __init__(self, genes: tuple[int, ...], fitness: base.Fitness) -> None:
        self.genes = genes
        self.fitness = fitness


class _Evaluator:
    """EvalMemory / EvalThroughput of Algorithm 9 (lines 19-26), memoised per chromosome and per scenario."""

    def __init__(self, models: dict[str, CnnModel], genes: tuple[Gene, ...], cost: CostModel,
                 alignment: int) -> None:
        self.models = models
        self.genes = genes
        self.cost = cost
        self.alignment = alignment
        self.params = params_bytes(models.values())
        self.full = {s: full_bands(m) for s, m in models.items()}
        self.slots = {s: [i for i, g in enumerate(genes) if g.scenario == s] for s in models}
        self.points: dict[tuple[int, ...], Point] = {}
        self._schedules: dict[tuple[str, tuple[int, ...]], tuple[CsdfGraph, Schedule, float]] = {}

    def bands(self, chromosome: tuple[int, ...]) -> dict[str, dict[str, int]]:
        result = {s: dict(b) for s, b in self.full.items()}
        for gene, value in zip(self.genes, chromosome, strict=True):
            for layer in gene.layers:
                result[gene.scenario][layer] = gene.choices[value]
        return result

    def tiles(self, chromosome: tuple[int, ...]) -> dict[str, tuple[tuple[tuple[str, ...], int], ...]]:
        """The tile groups a chromosome sets, per scenario."""
        result: dict[str, tuple[tuple[tuple[str, ...], int], ...]] = {}
        for s in self.models:
            graph = self._scenario(s, chromosome)[0]
            if graph.tiles:
                result[s] = tuple((t.layers, t.plan.band_rows) for t in graph.tiles)
        return result

    def cuts(self, chromosome: tuple[int, ...]) -> dict[str, tuple[str, ...]]:
        """The cut tensors a chromosome sets, per scenario (only those that change the schedule)."""
        graphs = {s: self._scenario(s, chromosome)[0] for s in self.models}
        return {s: g.cuts for s, g in graphs.items() if g.cuts}

    def _scenario(self, scenario: str, chromosome: tuple[int, ...]) -> tuple[CsdfGraph, Schedule, float]:
        key = (scenario, tuple(chromosome[i] for i in self.slots[scenario]))
        if key not in self._schedules:
            bands = dict(self.full[scenario])
            cuts = []
            tiles = []
            for i in self.slots[scenario]:
                gene = self.genes[i]
                if gene.kind == "cut":
                    if gene.choices[chromosome[i]]:
                        cuts.append(gene.layer)
                    continue
                if gene.kind == "tile":
                    if gene.choices[chromosome[i]]:
                        tiles.append((gene.group, gene.choices[chromosome[i]]))
                    continue
                for layer in gene.layers:
                    bands[layer] = gene.choices[chromosome[i]]
            model = self.models[scenario]
            graph = cnn_to_csdf(model, bands, name=scenario, cuts=cuts, tiles=tiles)
            seconds = config_seconds(model, bands, graph.tiles, self.cost)
            self._schedules[key] = (graph, schedule_csdf(graph), 1.0 / seconds if seconds > 0 else math.inf)
        return self._schedules[key]

    def __call__(self, chromosome: tuple[int, ...]) -> Point:
        if chromosome not in self.points:
            parts = {s: self._scenario(s, chromosome) for s in self.models}
            problem = reduced_problem([p[1] for p in parts.values()], alignment=self.alignment)
            arena = plan_arena(problem).arena_bytes  # a size only, thousands of times: the planner without place
            sparse: dict[str, dict[str, int]] = {}
            for gene, value in zip(self.genes, chromosome, strict=True):
                if value:
                    for layer in gene.layers:
                        sparse.setdefault(gene.scenario, {})[layer] = gene.choices[value]
            cuts = {s: p[0].cuts for s, p in parts.items() if p[0].cuts}
            tiles = {s: tuple((t.layers, t.plan.band_rows) for t in p[0].tiles) for s, p in parts.items()
                     if p[0].tiles}
            self.points[chromosome] = Point(self.params + arena, self.params, arena,
                                            {s: p[2] for s, p in parts.items()}, sparse, cuts, tiles)
        return self.points[chromosome]


def _smallest(gene: Gene) -> int:
    """Index of the gene's smallest band (for a cut or tile gene: off)."""
    if gene.kind != "band":
        return 0
    return min(range(len(gene.choices)), key=lambda i: gene.choices[i])


def _thresholds(genes: tuple[Gene, ...]) -> list[tuple[int, ...]]:
    """Per distinct height ``h``: the smallest band in layers at least ``h`` rows high, whole below."""
    heights = sorted({g.height for g in genes if g.kind == "band"})
    return [tuple(_smallest(g) if g.height >= h else 0 for g in genes) for h in heights]


def _with_cuts(chromosome: tuple[int, ...], genes: tuple[Gene, ...]) -> tuple[int, ...]:
    """``chromosome`` with every cut gene set (the partitioned variant of a seed)."""
    return tuple(1 if g.kind == "cut" else v for g, v in zip(genes, chromosome, strict=True))


def _front(points: Sequence[tuple[tuple[int, ...], Point]], scenarios: Sequence[str],
           fitness: type[base.Fitness]) -> list[tuple[tuple[int, ...], Point]]:
    """Non-dominated points (deap's sort), one per objective vector, by increasing memory."""
    individuals = []
    seen: set[tuple[float, ...]] = set()
    for index, (_, point) in enumerate(points):
        values = (float(point.memory_bytes), *(point.fps[s] for s in scenarios))
        if values in seen:
            continue
        seen.add(values)
        individuals.append(_Individual((index,), fitness(values)))
    first = tools.sortNondominated(individuals, len(individuals), first_front_only=True)[0]
    front = [points[ind.genes[0]] for ind in first]
    return sorted(front, key=lambda item: (item[1].memory_bytes, [-item[1].fps[s] for s in scenarios]))


def _pick(front: Sequence[tuple[tuple[int, ...], Point]], memory_limit: int | None, min_fps: Mapping[str, float],
          scenarios: Sequence[str], unreduced: Point) -> tuple[tuple[int, ...], Point]:
    """Algorithm 9, lines 9-16: the fastest front member meeting all constraints (module docstring: a deviation
    from line 14), else the front member with minimal memory (line 16)."""
    feasible = [item for item in front if item[1].meets(memory_limit, min_fps)]  # lines 9-12
    if feasible:  # line 14
        return max(feasible, key=lambda item: (relative_speed(item[1], unreduced, scenarios), -item[1].memory_bytes))
    return min(front, key=lambda item: (item[1].memory_bytes,  # line 16
                                        -min((item[1].fps[s] / min_fps[s] if min_fps.get(s) else math.inf)
                                             for s in scenarios)))


def relative_speed(point: Point, unreduced: Point, scenarios: Sequence[str]) -> float:
    """The worst over ``scenarios`` of ``point``'s modelled fps divided by the unreduced configuration's."""
    return min(point.fps[s] / unreduced.fps[s] if unreduced.fps[s] > 0 else 1.0 for s in scenarios)


def _violations(point: Point, memory_limit: int | None, min_fps: Mapping[str, float],
                best_fps: Mapping[str, float]) -> tuple[str, ...]:
    lines: list[str] = []
    if memory_limit is not None and point.memory_bytes > memory_limit:
        lines.append(f"memory: {point.memory_bytes} bytes > limit {memory_limit} bytes")
    for scenario, need in min_fps.items():
        have = point.fps.get(scenario, 0.0)
        if have < need:
            best = best_fps.get(scenario, have)
            reach = "no configuration reaches it" if best < need else "a configuration with more memory reaches it"
            lines.append(f"min_fps of scenario '{scenario}': {have:.2f} fps < {need:.2f} fps required "
                         f"(fastest configuration: {best:.2f} fps; {reach})")
    return tuple(lines)


def reduce_buffers(scenarios: Scenarios, *, memory_limit: int | None = None,
                   min_fps: Mapping[str, float] | None = None, cost: CostModel | None = None,
                   params: GaParams | None = None, stream_input: bool = False, alignment: int = 64,
                   progress: Progress | None = None, streams: int = 1) -> ReductionResult:
    """Thesis Algorithm 9: choose band heights for every layer of every scenario.

    ``memory_limit`` is ``M^c`` in bytes (None: no limit, so lines 1-5 exit early); ``min_fps`` maps a
    scenario to ``T^c_n``. ``streams`` > 1: the front also holds every front configuration run as that many
    band streams (:func:`with_streams`; ``pareto`` is then the front of each stream count), so that line 14
    weighs one frame at a time against several at once on the cores the machine has. ``progress(done,
    total)`` is called after the initial population and after each generation. A memory limit below every
    configuration evaluated raises ``InputError`` naming the smallest figure reached; fps constraints nobody
    meets are reported in ``violations``.
    """
    models = _folded(_scenarios(scenarios))
    params = params or GaParams()
    cost = cost or AnalyticCostModel()
    min_fps = {s: float(v) for s, v in (min_fps or {}).items()}
    unknown = sorted(set(min_fps) - set(models))
    if unknown:
        raise InputError(f"min_fps names unknown scenario(s) {', '.join(unknown)}", field="min_fps")
    if memory_limit is not None and memory_limit < 0:
        raise InputError(f"memory limit must be >= 0 bytes, got {memory_limit}", field="memory_limit_mb")
    if params.population < 2 or params.generations < 0:
        raise InputError("GA needs a population of at least 2 and generations >= 0", field="ga")
    refuse_below_weights(models, memory_limit)
    names = list(models)
    genes = reduction_genes(models, params.candidates, stream_input=stream_input,
                            tie_followers=params.tie_followers)
    if params.cuts and genes:
        genes += cut_genes(models)
    if params.tiles and genes:
        genes += tile_genes(models, params.candidates)
    evaluate = _Evaluator(models, genes, cost, alignment)
    whole = tuple(0 for _ in genes)
    unreduced = evaluate(whole)  # lines 1-2

    def result(chromosome: tuple[int, ...], point: Point, front: Sequence[Point], early: bool,
               generations: int) -> ReductionResult:
        bands, cuts, tiles = evaluate.bands(chromosome), evaluate.cuts(chromosome), evaluate.tiles(chromosome)
        best_fps = {s: max(p.fps[s] for p in evaluate.points.values()) for s in names}
        violations = _violations(point, memory_limit, min_fps, best_fps)
        # Φ as Algorithm 10 derives it: a tiled group fires as one actor, which band heights alone do not say
        phases = (plan_reduction(models, bands, cost=cost, alignment=alignment, cuts=cuts, tiles=tiles).phases
                  if any(tiles.values()) else {s: phases_of(bands[s], models[s]) for s in names})
        return ReductionResult(early, not violations, violations, memory_limit, min_fps, unreduced, point,
                               tuple(front), phases, bands, len(evaluate.points), generations, params.seed, cuts,
                               tiles)

    if memory_limit is None or unreduced.memory_bytes <= memory_limit or not genes:  # line 3
        if progress is not None:
            progress(params.generations, params.generations)
        if memory_limit is not None and unreduced.memory_bytes > memory_limit:
            raise InputError(f"memory limit {_mb(memory_limit)} is below the smallest memory reachable: "
                             f"{_mb(unreduced.memory_bytes)} (no layer can be processed by parts)",
                             field="memory_limit_mb")
        return result(whole, unreduced, [unreduced], True, 0)  # lines 4-5

    fitness = type("ReductionFitness", (base.Fitness,), {"weights": (-1.0,) + (1.0,) * len(names)})
    rng = random.Random(params.seed)

    def individual(chromosome: tuple[int, ...]) -> _Individual:
        point = evaluate(chromosome)
        return _Individual(chromosome, fitness((float(point.memory_bytes), *(point.fps[s] for s in names))))

    seeds = [whole, tuple(_smallest(g) for g in genes)]
    if params.threshold_seeds:
        seeds += _thresholds(genes)
    if any(g.kind == "cut" for g in genes):
        seeds += [_with_cuts(c, genes) for c in seeds[1:]]
    if any(g.kind == "tile" for g in genes):  # every group tiled at one band, the rest of the seed kept
        for band in sorted({c for g in genes if g.kind == "tile" for c in g.choices[1:]}):
            tiled = tuple(g.choices.index(min((c for c in g.choices[1:] if c >= band), default=g.choices[-1]))
                          if g.kind == "tile" else v for g, v in zip(genes, seeds[1], strict=True))
            seeds += [tiled, _with_cuts(tiled, genes)]
    seeds = list(dict.fromkeys(seeds))[: params.population]
    while len(seeds) < params.population:
        seeds.append(tuple(rng.randrange(len(g.choices)) for g in genes))
    population = tools.selNSGA2([individual(c) for c in seeds], params.population)
    if progress is not None:
        progress(0, params.generations)
    started = time.monotonic()
    done_generations = 0
    for generation in range(params.generations):  # line 8: the GA
        if params.time_budget_s is not None and time.monotonic() - started > params.time_budget_s:
            break
        done_generations = generation + 1
        ranks = _ranks(population)
        offspring: list[tuple[int, ...]] = []
        while len(offspring) < params.population:
            a, b = _tournament(population, ranks, rng), _tournament(population, ranks, rng)
            child_a, child_b = list(a.genes), list(b.genes)
            if len(genes) > 1 and rng.random() < params.crossover:
                cut = rng.randrange(1, len(genes))
                child_a[cut:], child_b[cut:] = b.genes[cut:], a.genes[cut:]
            for child in (child_a, child_b):
                if rng.random() < params.mutation:
                    _mutate(child, genes, rng)
                offspring.append(tuple(child))
        population = tools.selNSGA2(population + [individual(c) for c in offspring], params.population)
        if progress is not None:
            progress(generation + 1, params.generations)

    evaluated = list(evaluate.points.items())
    lowest = min(point.memory_bytes for _, point in evaluated)
    if memory_limit is not None and lowest > memory_limit:
        best = min((p for _, p in evaluated), key=lambda p: p.memory_bytes)
        raise InputError(f"memory limit {_mb(memory_limit)} is below the smallest memory any band configuration "
                         f"reached: {_mb(lowest)} ({lowest} bytes: parameters {_mb(best.params_bytes)}"
                         f" + buffers {_mb(best.arena_bytes)})",
                         field="memory_limit_mb")
    front = _front(evaluated, names, fitness)
    gain = streams_gain(streams)
    if streams > 1 and gain > 1:  # the same configurations as band streams: the front of each stream count, so
        # that a one-stream point a two-stream one dominates stays a fallback where the executor's arenas miss
        front = sorted([*front, *_front([(c, with_streams(p, streams, gain)) for c, p in front], names, fitness)],
                       key=lambda item: (item[1].memory_bytes, [-item[1].fps[s] for s in names]))
    chromosome, point = _pick(front, memory_limit, min_fps, names, unreduced)  # lines 9-16
    return result(chromosome, point, [p for _, p in front], False, done_generations)


def _ranks(population: Sequence[_Individual]) -> dict[int, int]:
    """Front rank of every individual (by identity), for the crowded tournament."""
    ranks: dict[int, int] = {}
    for rank, front in enumerate(tools.sortNondominated(list(population), len(population))):
        for ind in front:
            ranks[id(ind)] = rank
    return ranks


def _tournament(population: Sequence[_Individual], ranks: Mapping[int, int], rng: random.Random) -> _Individual:
    """Binary tournament on (front rank, crowding distance), NSGA-II's crowded comparison."""
    a, b = population[rng.randrange(len(population))], population[rng.randrange(len(population))]
    key_a = (ranks.get(id(a), 0), -getattr(a.fitness, "crowding_dist", 0.0))
    key_b = (ranks.get(id(b), 0), -getattr(b.fitness, "crowding_dist", 0.0))
    return a if key_a <= key_b else b


def _mutate(child: list[int], genes: Sequence[Gene], rng: random.Random) -> None:
    """Single-gene mutation (thesis Figure 2.10): one gene takes another of its values."""
    i = rng.randrange(len(genes))
    others = [v for v in range(len(genes[i].choices)) if v != child[i]]
    if others:
        child[i] = rng.choice(others)

"""Constraint parsing, bit-vector matching against the per-node reference, and the
node matrix's incremental updates against recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tcluster.domain.constraints import Constraint, parse_constraint
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources
from tcluster.scheduler.matching import EligibleCache, first_unmatched, match_mask
from tcluster.scheduler.nodestate import NodeMatrix, unpack_bits



def pack_bits(mask: np.ndarray) -> np.ndarray:
    """bool (n,) -> uint64 words, bit i of the vector at word i // 64, bit i % 64: the layout
    the node matrix keeps its label masks in, written out here to check unpack_bits against."""
    padded = np.zeros(((len(mask) + 63) // 64) * 64, dtype=bool)
    padded[: len(mask)] = mask
    return np.packbits(padded, bitorder="little").view(np.uint64)


@pytest.mark.parametrize("text,expected", [
    ("rack=r1", Constraint("eq", "rack", ("r1",))),
    ("rack == r1", Constraint("eq", "rack", ("r1",))),
    ("disk!=hdd", Constraint("ne", "disk", ("hdd",))),
    ("arch in (x86_64,arm64)", Constraint("in", "arch", ("x86_64", "arm64"))),
    ("arch notin ( ppc64le )", Constraint("notin", "arch", ("ppc64le",))),
    ("has gpu", Constraint("has", "gpu")),
    ("!has gpu", Constraint("nothas", "gpu")),
    ("not has gpu", Constraint("nothas", "gpu")),
    ("topology.kubernetes.io/zone=a", Constraint("eq", "topology.kubernetes.io/zone", ("a",))),
])
def test_parse(text: str, expected: Constraint) -> None:
    assert parse_constraint(text) == expected
    assert parse_constraint(str(expected)) == expected   # the canonical form parses back


@pytest.mark.parametrize("text,position", [
    ("rack", 5), ("rack=", 6), ("=r1", 1), ("arch in x86", 9), ("arch in (a,", 12), ("arch in (a b)", 12),
    ("rack=r1 extra", 9), ("rack ~ r1", 6), ("has", 4),
])
def test_bad_expressions_name_the_position(text: str, position: int) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_constraint(text)
    assert f"at position {position} of" in str(info.value)


label_values = st.sampled_from(["a", "b", "c"])
node_labels = st.dictionaries(st.sampled_from(["rack", "disk", "gpu"]), label_values, max_size=3)
keys = st.sampled_from(["rack", "disk", "gpu"])
constraints = st.one_of(   # the shapes the parser produces
    st.builds(Constraint, st.sampled_from(["eq", "ne"]), keys, label_values.map(lambda v: (v,))),
    st.builds(Constraint, st.sampled_from(["in", "notin"]), keys, st.lists(label_values, min_size=1, max_size=2).map(tuple)),
    st.builds(Constraint, st.sampled_from(["has", "nothas"]), keys),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(node_labels, min_size=1, max_size=150), st.lists(constraints, max_size=3))
def test_bit_vectors_agree_with_the_per_node_reference(labels, wanted) -> None:  # type: ignore[no-untyped-def]
    matrix = NodeMatrix()
    for i, node in enumerate(labels):
        matrix.upsert(f"n{i:03d}", Resources(1, 1), node)
    got = unpack_bits(match_mask(wanted, matrix), len(matrix.names))
    expected = [all(c.holds(matrix.labels[i]) for c in wanted) for i in range(len(matrix.names))]
    assert got.tolist() == expected
    cached = EligibleCache().eligible(tuple(wanted), matrix)
    assert cached is None if not wanted else cached.tolist() == expected


def test_first_unmatched_names_the_constraint_no_node_meets() -> None:
    matrix = NodeMatrix()
    matrix.upsert("n1", Resources(1, 1), {"rack": "r1"})
    wanted = (parse_constraint("rack=r1"), parse_constraint("rack=r9"))
    assert first_unmatched(wanted, matrix) == wanted[1]


def test_eligible_cache_follows_label_changes() -> None:
    matrix, cache = NodeMatrix(), EligibleCache()
    matrix.upsert("n1", Resources(1, 1), {"rack": "r1"})
    wanted = (parse_constraint("rack=r2"),)
    assert cache.eligible(wanted, matrix).tolist() == [False]
    matrix.upsert("n1", Resources(1, 1), {"rack": "r2"})
    assert cache.eligible(wanted, matrix).tolist() == [True]


@given(st.lists(st.booleans(), max_size=300))
def test_pack_unpack_round_trip(bits: list[bool]) -> None:
    assert unpack_bits(pack_bits(np.array(bits, dtype=bool)), len(bits)).tolist() == bits


ops = st.lists(st.tuples(st.sampled_from(["upsert", "remove", "allocate", "release", "report", "down"]),
                         st.integers(0, 6), st.sampled_from([0.05, 0.5, 1.0, 2.0]), st.sampled_from([0, 64, 512])),
               max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_incremental_updates_match_a_plain_model(operations) -> None:  # type: ignore[no-untyped-def]
    matrix = NodeMatrix()
    model: dict[str, dict] = {}
    for op, n, cpu, mem in operations:
        name = f"n{n}"
        amount = Resources(cpu, mem)
        if op == "upsert":
            matrix.upsert(name, Resources(cpu * 4, mem * 4), {"k": str(n)})
            entry = model.setdefault(name, {"used": Resources(), "reported": None, "up": True})
            entry.update(cap=Resources(cpu * 4, mem * 4), up=True)
        elif name not in model:
            continue
        elif op == "remove":
            matrix.remove(name)
            del model[name]
        elif op in ("allocate", "release"):
            getattr(matrix, op)(name, amount)
            model[name]["used"] = model[name]["used"] + (amount if op == "allocate" else amount.times(-1))
        elif op == "report":
            matrix.report_free(name, amount)
            model[name]["reported"] = amount
        else:
            matrix.set_schedulable(name, False)
            model[name]["up"] = False
    view = matrix.view()
    assert [view.names[i] for i in view.order] == sorted(model)
    largest = [max((e["cap"].cpu for e in model.values()), default=0), max((e["cap"].memory for e in model.values()), default=0)]
    assert view.scale.tolist() == [x if x > 0 else 1.0 for x in largest]
    assert int(unpack_bits(matrix.all_mask(), len(view.names)).sum()) == len(matrix)
    for i in view.order:
        name = view.names[i]
        entry = model[name]
        free = entry["cap"] - entry["used"]
        if entry["reported"] is not None:
            free = Resources(min(free.cpu, entry["reported"].cpu), min(free.memory, entry["reported"].memory))
        assert view.free[i].tolist() == pytest.approx([free.cpu, free.memory])
        assert bool(view.schedulable[i]) == entry["up"]
        assert view.normalized_free_by_kind[:, i].tolist() == pytest.approx((view.free[i] / view.scale).tolist())
        assert unpack_bits(matrix.label_mask("k", name[1:]), len(view.names))[i]

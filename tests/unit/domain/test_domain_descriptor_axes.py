"""Descriptor axes as data: one table (DESCRIPTOR_AXES) that the dataclass, the protobuf message, the
codec, transitions, operators and the CLI's words all follow."""

import itertools
from datetime import UTC, datetime

import pytest

from kernelfoundry.cli.levels import AXIS_WORDS, level_words
from kernelfoundry.codec import descriptors_from_proto, descriptors_to_proto
from kernelfoundry.domain.archive import ALL_CELLS
from kernelfoundry.domain.descriptors import (
    AXES,
    CELL_COUNT,
    DESCRIPTOR_AXES,
    LEVELS,
    Axis,
    Descriptors,
    axis_named,
)
from kernelfoundry.domain.operators import AXIS_OPERATORS, OPERATORS
from kernelfoundry.domain.transitions import LEVEL_NAMES, legal_directions, step
from kernelfoundry.generators.base import MUTATIONS
from kernelfoundry.lineage.codec import from_document, to_document
from kernelfoundry.lineage.records import CandidateRecord
from kernelfoundry.v1 import kernel_pb2


def test_the_dataclass_and_the_protobuf_message_have_one_field_per_axis_in_order():
    assert [f.name for f in kernel_pb2.Descriptors.DESCRIPTOR.fields] == list(AXES)
    assert Descriptors().as_dict() == dict.fromkeys(AXES, 0)


def test_every_cell_round_trips_through_the_protobuf_codec():
    cells = list(itertools.product(range(LEVELS), repeat=len(AXES)))
    assert len(cells) == CELL_COUNT == len(ALL_CELLS)
    for cell in cells:
        d = Descriptors.from_cell(cell)
        assert d.cell == cell
        assert descriptors_from_proto(descriptors_to_proto(d)) == d


def test_descriptors_travel_through_the_lineage_codec_by_axis_name():
    analysed = Descriptors.from_cell(range(len(AXES)))
    record = CandidateRecord(candidate_id="c", run_id="r", analysed=analysed, created_at=datetime.now(UTC))
    document = to_document(record)
    assert document["analysed"] == {axis: i for i, axis in enumerate(AXES)}
    assert from_document(CandidateRecord, document).analysed == record.analysed
    # a record written before an axis existed reads as level 0 on it (as a protobuf message does)
    older = {**document, "analysed": {axis: 1 for axis in AXES[:-1]}}
    assert from_document(CandidateRecord, older).analysed == Descriptors.from_cell(
        (*(1,) * (len(AXES) - 1), 0)
    )


def test_every_axis_names_its_levels_words_and_operators():
    for axis in DESCRIPTOR_AXES:
        assert len(axis.levels) == LEVELS
        assert all(len(words) == LEVELS for words in axis.words.values())
        assert axis.operators and set(axis.operators) <= set(OPERATORS) <= set(MUTATIONS)
        assert axis_named(axis.name) is axis


def test_transitions_operators_and_cli_words_come_from_the_axes():
    assert {name: names for name, names in LEVEL_NAMES.items()} == {a.name: a.levels for a in DESCRIPTOR_AXES}
    assert {k: v for k, v in AXIS_OPERATORS.items() if k != "stay"} == {
        a.name: a.operators for a in DESCRIPTOR_AXES
    }
    for axis in DESCRIPTOR_AXES:
        assert level_words("cuda.h200", axis.name) == axis.words["cuda"]
        assert level_words("cpu.x86_64", axis.name) == axis.words.get("cpu", axis.words["cuda"])
        assert all(axis.name in words for words in AXIS_WORDS.values())


def test_steps_move_one_axis_and_stay_inside_the_grid():
    corner = (0,) * len(AXES)
    assert {d for d in legal_directions(corner) if d[1] != 0} == {(axis, +1) for axis in AXES}
    for i, axis in enumerate(AXES):
        moved = step(corner, (axis, +1))
        assert moved == tuple(1 if j == i else 0 for j in range(len(AXES)))


def test_building_descriptors_from_a_cell_or_levels():
    assert Descriptors.from_levels({"memory": 2}, missing=0) == Descriptors(memory=2)
    proto = kernel_pb2.Descriptors(memory=1, algorithm=2, parallelism=3)
    assert Descriptors.from_levels(proto) == Descriptors(1, 2, 3)
    with pytest.raises(KeyError):
        Descriptors.from_levels({"memory": 2})
    with pytest.raises(ValueError):
        Descriptors.from_cell((1, 2))
    with pytest.raises(ValueError):
        Descriptors.from_cell((0,) * (len(AXES) - 1) + (LEVELS,))
    with pytest.raises(KeyError):
        axis_named("latency")


def test_an_axis_with_the_wrong_number_of_level_names_is_refused():
    with pytest.raises(ValueError):
        Axis("x", levels=("a", "b"), words={"cuda": ("a", "b", "c", "d")}, operators=("retune",))
    with pytest.raises(ValueError):
        Axis("x", levels=("a", "b", "c", "d"), words={"cpu": ("a", "b", "c", "d")}, operators=("retune",))

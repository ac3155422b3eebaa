"""The one tunables parser. The cases below are where the proposer's old regex (line-anchored, default
required, malformed lines skipped) and the sweeps' old parser (marker anywhere, default optional,
malformed lines refused) disagreed; each states what the single grammar decides."""

import pytest

from kernelfoundry import codec
from kernelfoundry.domain import sweeps
from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.domain.tunables import (
    TunableError,
    declaration,
    is_define_name,
    is_define_value,
    parse_tunables,
    parse_value,
    value_text,
)
from kernelfoundry.generators import heuristic
from kernelfoundry.generators.heuristic import candidate


def test_every_reader_of_tunables_uses_the_one_parser():
    assert sweeps.parse_tunables is parse_tunables
    assert heuristic.parse_tunables is parse_tunables
    assert candidate.parse_tunables is parse_tunables


def test_a_plain_declaration_reads_name_values_and_default():
    code = "// @kf.tunable BLOCK in [64, 128, 256] default 128\n#ifndef BLOCK\n#define BLOCK 128\n#endif\n"
    assert parse_tunables(code) == (Tunable("BLOCK", (64, 128, 256), 128),)


def test_an_indented_declaration_counts():
    # the proposer's regex was anchored at column 0 and skipped it
    assert parse_tunables("  {\n    //  @kf.tunable TILE in [8, 16] default 16\n  }") == (
        Tunable("TILE", (8, 16), 16),
    )


def test_without_default_the_first_value_is_the_default():
    # the proposer's regex required `default` and skipped the line
    assert parse_tunables("// @kf.tunable UNROLL in [1, 2, 4]") == (Tunable("UNROLL", (1, 2, 4), 1),)


def test_quoted_values_lose_their_quotes():
    # the proposer's regex kept the quotes, so the value was `"row"` and the build refused it
    assert parse_tunables('// @kf.tunable LAYOUT in ["row", \'col\'] default "col"') == (
        Tunable("LAYOUT", ("row", "col"), "col"),
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("128", 128), ("-3", -3), ("0", 0), ("float4", "float4"), ("1e-3", "1e-3"), ("010", "010"),
     ("1_000", "1_000"), ("+4", "+4")],
)  # fmt: skip
def test_only_decimal_integers_become_ints_the_rest_is_the_text_the_build_passes(text, value):
    # both old parsers used int(), which reads `1_000` as 1000 and `010` as 10 while C reads 010 as 8
    assert parse_value(text) == value
    assert parse_tunables(f"// @kf.tunable X in [{text}]")[0].values == (value,)


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("// @kf.tunable X [1, 2]", "cannot parse"),  # the proposer skipped malformed lines silently
        ("// @kf.tunable X in [1, 2] default 1 extra", "cannot parse"),
        ("// @kf.tunable X in [1, 2] default 3", "not in"),  # the proposer kept a default outside its values
        ("// @kf.tunable X in [1, 1]", "repeats"),  # the proposer kept repeated values
        ('// @kf.tunable X in [1, "1"]', "repeats"),
        ("// @kf.tunable X in []", "no values"),
        ("// @kf.tunable X in [1, , 2]", "empty value"),  # the sweeps dropped the empty item
        ("// @kf.tunable X in [a b, c]", "single token"),  # the sweeps kept `a b`; the build refused it
        ("// @kf.tunable 1X in [1, 2]", "C identifier"),  # the proposer's \\w+ took it
        ("// @kf.tunable X in [1]\n// @kf.tunable X in [2]", "declared twice"),  # the proposer kept both
        ("int n = 4; // @kf.tunable X in [1, 2]", "of its own"),  # the sweeps took it, the proposer did not
        ("// @kf.tunable X\n//   in [1, 2] default 1", "cannot parse"),  # the proposer's \\s+ spanned lines
    ],
)
def test_a_malformed_declaration_is_refused_with_a_reason(code, says):
    with pytest.raises(TunableError) as err:
        parse_tunables(code)
    assert err.value.reason == "invalid_tunable"
    assert says in err.value.message


def test_lines_that_only_mention_the_marker_are_not_declarations():
    code = '// see the @kf.tunable lines below\n// @kf.tunables are swept\nconst char* s = "@kf.tunable";\n'
    assert parse_tunables(code) == ()


def test_windows_line_endings_parse_like_unix_ones():
    code = "// @kf.tunable A in [1, 2] default 2\r\n// @kf.tunable B in [x, y]\r\n"
    assert parse_tunables(code) == parse_tunables(code.replace("\r\n", "\n"))
    assert parse_tunables(code) == (Tunable("A", (1, 2), 2), Tunable("B", ("x", "y"), "x"))


@pytest.mark.parametrize(
    "tunable",
    [
        Tunable("BLOCK", (64, 128), 128),
        Tunable("VEC", ("float", "float4"), "float"),
        Tunable("S", (-1, 0), 0),
    ],
)
def test_a_written_declaration_reads_back_unchanged(tunable):
    assert declaration(tunable).startswith("// @kf.tunable ")
    assert parse_tunables(declaration(tunable)) == (tunable,)


def test_wire_values_decode_by_the_same_rule():
    src = KernelSource(
        "cpp",
        "// @kf.tunable T in [010, 16] default 16\n// @kf.tunable V in [float4, 8]\n",
        params={"T": "010", "V": 8},
    )
    src = KernelSource(src.language, src.code, tunables=parse_tunables(src.code), params=src.params)
    back = codec.kernel_from_proto(codec.kernel_to_proto(src))
    assert back.tunables == src.tunables
    assert dict(back.params) == {"T": "010", "V": 8}
    assert all(parse_value(value_text(v)) == v for t in src.tunables for v in t.values)


@pytest.mark.parametrize(
    ("name", "ok"), [("BLOCK", True), ("_x9", True), ("9x", False), ("A-B", False), ("X\n", False)]
)
def test_define_names_are_c_identifiers(name, ok):
    assert is_define_name(name) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [("128", True), ("1e-3", True), ("float4", True), ("a b", False), ("1;rm", False), ("1\n", False)],
)
def test_define_values_are_single_tokens(value, ok):
    assert is_define_value(value) is ok

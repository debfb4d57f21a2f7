"""Parity with the authors' code reward (HKUST-KnowComp/CorrGRPO, code_rl/leetcodedataset_train_rl/reward.py +
run.sh).

Expected values are worked out from their definitions by hand (the tables below say how), on real HumanEval
problems through the real sandbox and on hand-made variants; none is read off our own output.
"""

from __future__ import annotations

import ast
import asyncio
import difflib
import random
from collections.abc import Iterator
from typing import Any

import cydifflib
import pytest

from corrgrpo_code.declaration import COMPONENTS, CodeSettings
from corrgrpo_code.efficiency import efficiency
from corrgrpo_code.extract import extract, marker_of, split_fences
from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.similarity import (
    MATCH_BUDGET,
    Reference,
    TooManyPairs,
    ast_similarity,
    matched,
    reachable_pairs,
    search,
    structure,
)
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import Sandbox

CLASS, HE0 = "class Solution", "def has_close_elements("
IMPL = "class Solution:\n    def solve(self, v):\n        return v + 1"
STUB = "class Solution:\n    def solve(self, v): ..."


# --- extraction and format: (response, marker) -> (code, fenced, format)
# ------------------------------------------------
@pytest.mark.parametrize(
    ("response", "marker", "code", "fenced", "fmt"),
    [
        (f"```python\n{IMPL}\n```", CLASS, IMPL, True, 1.0),
        (f"Sure:\n{IMPL}", CLASS, IMPL, False, 0.0),  # unfenced: from the marker on, format 0
        (f"<think>{STUB}</think>\n\nAnswer:\n{IMPL}", CLASS, IMPL, False, 0.0),  # after the last </think>
        (
            f"```python\n{STUB}\n```\nthen\n```python\n{IMPL}\n```",
            CLASS,
            IMPL,
            True,
            1.0,
        ),  # both hold it: longest
        (f"```python\n{IMPL}\n```\n```python\n{'x = 1  # long, no marker' * 5}\n```", CLASS, IMPL, True, 1.0),
        (
            "```python\ndef solve(v):\n    return v + 1\n```",
            CLASS,
            "def solve(v):\n    return v + 1",
            True,
            0.0,
        ),
        (f"```\n{IMPL}\n```", CLASS, IMPL, True, 1.0),  # untagged counts
        (f"```PY   \n{IMPL}```", CLASS, IMPL, True, 1.0),  # tag in any case, spaces, then one newline
        (
            "```python3\nx = 1\n```",
            CLASS,
            "3\nx = 1",
            True,
            0.0,
        ),  # `python` is the tag; the `3` stays in the body
        ("```js\nlet x\n```", CLASS, "js\nlet x", True, 0.0),  # another language's block still counts
        (
            f"```python\n{IMPL}\n```\n```python\nunclosed",
            CLASS,
            IMPL,
            True,
            1.0,
        ),  # an unpaired fence is ignored
        ("inline ```a = 1``` and ```b = 2```", CLASS, "a = 1", True, 0.0),  # equal lengths: the first
        ("no code here", CLASS, "no code here", False, 0.0),
        ("```python\n```", CLASS, "", True, 0.0),
        ("```python\ndef has_close_elements(n, t):\n    return False\n```", HE0, None, True, 1.0),
        (
            "```python\ndef has_close(n, t):\n    return False\n```",
            HE0,
            None,
            True,
            0.0,
        ),  # not the entry point
    ],
)
def test_extraction_table(response: str, marker: str, code: str | None, fenced: bool, fmt: float) -> None:
    got = extract(response, marker)
    assert (got.fenced, got.format) == (fenced, fmt)
    if code is not None:
        assert got.code == code


def test_markers_and_fences() -> None:
    assert marker_of("Solution().twoSum") == CLASS and marker_of("has_close_elements") == HE0
    assert split_fences("a ```python\nx\n``` b ```y``` c ```") == ["x\n", "y"]


# --- AST similarity: hand-computed SequenceMatcher ratios 2M / (|a| + |b|)
# ---------------------------------------------
# x = 1 -> Module Assign Name Store /Store /Name Constant /Constant /Assign /Module (10 tokens)
# x     -> Module Expr Name Load /Load /Name /Expr /Module (8); blocks: Module, Name, /Name, /Module: M = 4
# x = 1; y = 2 (18) vs x = 1 (10): block Module..Assign's close (9), then /Module (1): M = 10
# x = a + b vs x = a - b (20 each): all but Add /Add vs Sub /Sub: 11 + 7 = 18
# f(a) (14) vs f(a, b) (18): the first 11 tokens, then /Call /Expr /Module: M = 14
@pytest.mark.parametrize(
    ("candidate", "reference", "expected"),
    [
        ("x = 1", "y = 'text'", 1.0),  # names and literal values are not node types
        ("def f(a):\n    return a", "def g(b):\n    return b", 1.0),
        ("x", "x = 1", 8 / 18),
        ("x = 1\ny = 2", "x = 1", 20 / 28),
        ("x = a + b", "x = a - b", 36 / 40),
        ("f(a)", "f(a, b)", 28 / 32),
        ("x = 1", "Here it is:\n```python\ny = 2\n```\n", 1.0),  # a fenced reference: its code
        ("x = 1", "   y = 2\n", 1.0),  # a plain reference is stripped
        ("class Solution", "x = 1", 0.0),  # a candidate that does not parse
        ("", "x = 1", 0.0),
        ("x = 1", "", 0.0),  # no reference: unavailable
        ("x = 1", "def broken(:", 0.0),
    ],
)
def test_ast_similarity_table(candidate: str, reference: str, expected: float) -> None:
    assert ast_similarity(candidate, reference) == pytest.approx(expected, abs=1e-12)


def test_structure_tokens_and_reference_gate() -> None:
    assert structure(ast.parse("x = 1")) == [
        *(
            "Module",
            "Assign",
            "Name",
            "Store",
            "/Store",
            "/Name",
            "Constant",
            "/Constant",
            "/Assign",
            "/Module",
        )
    ]
    assert not Reference.of("", CLASS).available and not Reference.of("def broken(:", CLASS).available
    assert Reference.of("x = 1", CLASS).available
    deep = "x = " + "-" * 2000 + "1"  # deeper than a recursive walk can go (the parser takes it)
    assert len(structure(ast.parse(deep))) > 8_000


def test_block_search_is_difflibs_on_real_and_random_sequences() -> None:
    """SequenceMatcher is the definition: the budgeted search must find exactly its matching blocks."""
    sequences = [structure(ast.parse(p.reference)) for p in humaneval_problems()]
    rng = random.Random(7)
    pairs = [(rng.choice(sequences), rng.choice(sequences)) for _ in range(150)]
    for _ in range(400):
        alphabet = rng.choice((1, 2, 3, 8))
        pairs.append(  # type: ignore[arg-type]
            tuple([str(rng.randrange(alphabet)) for _ in range(rng.randrange(40))] for _ in range(2))
        )
    for a, b in pairs:
        blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        where: dict[str, list[int]] = {}
        for j, token in enumerate(b):
            where.setdefault(token, []).append(j)
        assert matched(a, b, where) == sum(block.size for block in blocks)


def _perturbed(tokens: list[str], rng: random.Random) -> Iterator[list[str]]:
    """Candidates near a reference: tokens replaced, dropped or duplicated, first half, blocks reversed."""
    for _ in range(3):
        changed = list(tokens)
        for _ in range(rng.randrange(1, 6)):
            k = rng.randrange(len(changed))
            changed[k : k + 1] = rng.choice(([], [rng.choice(tokens)], [changed[k]] * 2))
        yield changed
    yield tokens[: len(tokens) // 2]
    yield [
        token for block in reversed([tokens[i : i + 7] for i in range(0, len(tokens), 7)]) for token in block
    ]


def test_cydifflib_ratios_are_difflibs_on_humaneval_and_perturbed_candidates() -> None:
    """The 164 canonical solutions against perturbed copies of themselves and against the next problem's:
    cydifflib's ratio, and the component computed through it, equal difflib's exactly (the definition)."""
    rng = random.Random(11)
    references = [structure(ast.parse(p.reference)) for p in humaneval_problems()]
    fast = total = 0
    for index, b in enumerate(references):
        where = {token: [j for j, t in enumerate(b) if t == token] for token in set(b)}
        for a in [*_perturbed(b, rng), references[(index + 1) % len(references)]]:
            expected = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
            assert cydifflib.SequenceMatcher(None, a, b, autojunk=False).ratio() == expected
            assert 2 * matched(a, b, where) / (len(a) + len(b)) == expected
            fast += a != b and reachable_pairs(a, b, where) <= MATCH_BUDGET
            total += 1
    assert fast >= 0.95 * total  # the comparison above went through cydifflib, not `search`


def test_equal_sequences_need_no_search_and_keep_its_budget() -> None:
    """Equal sequences (the reference's own structure) are one whole block without the search, and over the
    budget exactly when the search would be: at every budget around the search's own count of examined pairs.
    """
    pathological = ["Name", "Load", "/Load", "/Name"] * 50
    for tokens in [structure(ast.parse(p.reference)) for p in list(humaneval_problems())[:20]] + [
        pathological
    ]:
        where: dict[str, list[int]] = {}
        for j, token in enumerate(tokens):
            where.setdefault(token, []).append(j)
        assert (
            matched(list(tokens), tokens, where) == search(tokens, tokens, where, MATCH_BUDGET) == len(tokens)
        )
        count = len(tokens) + sum(len(where[token]) for token in tokens)
        for budget in (count - 1, count, count + 1):
            outcomes = []
            for compare in (matched, search):
                try:
                    outcomes.append(compare(list(tokens), tokens, where, budget))
                except TooManyPairs:
                    outcomes.append("over")
            assert outcomes[0] == outcomes[1] == ("over" if budget < count else len(tokens)), (
                budget,
                outcomes,
            )


def test_a_pathological_pair_stops_at_the_budget() -> None:
    """Constant against alternating tokens: difflib took 315 s on 2,000 each; here the budget ends it."""
    a, b = ["Name"] * 2000, ["Name", "Load"] * 1000
    with pytest.raises(TooManyPairs):
        matched(a, b, {"Name": list(range(0, 2000, 2)), "Load": list(range(1, 2000, 2))})
    assert ast_similarity("x\n" * 3000, "x = (" + "x + " * 1500 + "x)") == 0.0  # scored 0, not stalled


# --- efficiency: clip(1 - t / t_ref, 0, 1), applied only when both times are positive ---------------------
@pytest.mark.parametrize(
    ("t", "t_ref", "expected"),
    [
        (0.25, 1.0, 0.75),
        (1.0, 1.0, 0.0),
        (2.0, 1.0, 0.0),
        (0.0, 1.0, 0.0),
        (0.25, 0.0, 0.0),
        (0.25, None, 0.0),
    ],
)
def test_efficiency_formula(t: float, t_ref: float | None, expected: float) -> None:
    assert efficiency(t, t_ref) == expected


def test_default_weights_are_the_authors() -> None:
    weights = {c.name: c.weight for c in COMPONENTS}
    assert weights == {
        "format": 0.05,
        "syntax": 0.05,
        "compile": 0.05,
        "runtime": 0.25,
        "correct": 0.60,
        "ast_similarity": 0.30,
        "efficiency": 0.20,
        "pass_rate": 0.0,  # ours: partial credit for stacks that want it, off by default
    }
    assert {c.name: (c.min, c.max) for c in COMPONENTS}["efficiency"] == (0, 1)


# --- the chain on real HumanEval problems, through the real sandbox
# -----------------------------------------------------
@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=2, preload=[CHILD_FILE]) as box:
        yield box


def run(sandbox: Sandbox, problem: CodeProblem, completions: list[str], **settings: Any) -> list[Scored]:
    chosen = CodeSettings(code_cpu_s=2, code_wall_s=4, code_workers=2, **settings)
    scorer = CodeScorer(sandbox, MemoryStore(), {}, chosen)
    results = asyncio.run(scorer.score([CodeItem(problem=problem, completion=c) for c in completions]))
    assert all(isinstance(r, Scored) for r in results), results
    return results  # type: ignore[return-value]


HUMANEVAL = {p.task_id: p for p in humaneval_problems()}
H0 = HUMANEVAL["HumanEval/0"]
# the reference without its import line
H0_BODY = H0.reference[H0.reference.index("def has_close_elements(") :]


def ratio(candidate: str, reference: str) -> float:
    """The definition on two real programs (difflib itself, over the node-type sequences)."""
    a, b = (structure(ast.parse(source)) for source in (candidate, reference.strip()))
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


# Lt -> Gt: one node, 2 of n tokens differ, M = n - 2
BUGGY = H0.reference.replace("< threshold", "> threshold")
RAISING = H0.reference.replace("return False", "raise ValueError")
ASSERTING = H0.reference.replace("return False", "assert False, 'no pair'")
N0 = len(structure(ast.parse(H0.reference.strip())))

# name, response, (format, syntax, compile, runtime, correct), similarity (a number, a source to compare with,
# or None: the extracted code itself), stage
H0_CASES = [
    ("fenced", f"```python\n{H0.reference}\n```", (1, 1, 1, 1, 1), 1.0, "passed"),
    ("unfenced", f"Here you go:\n{H0.reference}", (0, 1, 1, 1, 1), H0_BODY, "passed"),  # from `def ...(` on
    (
        "two blocks",
        f"```python\n{H0_BODY[:60]}\n```\nFull:\n```python\n{H0.reference}\n```",
        (1, 1, 1, 1, 1),
        1.0,
        "passed",
    ),
    ("name error", f"```python\n{H0.reference}\nundefined_name\n```", (1, 1, 1, 0, 0), None, "toplevel"),
    ("return outside", f"```python\n{H0.reference}\nreturn 1\n```", (1, 1, 0, 0, 0), None, "syntax"),
    ("own assert", f"```python\n{H0.reference}\nassert False\n```", (1, 1, 1, 1, 0), None, "toplevel"),
    ("failing assert", f"```python\n{BUGGY}\n```", (1, 1, 1, 1, 0), (N0 - 2) / N0, "assertion"),
    ("raising test", f"```python\n{RAISING}\n```", (1, 1, 1, 0, 0), None, "test_error"),
    (
        "assert in function",
        f"```python\n{ASSERTING}\n```",
        (1, 1, 1, 1, 0),
        None,
        "test_error",
    ),  # an AssertionError
    (
        "syntax error",
        "```python\ndef has_close_elements(numbers, threshold)\n    return 1\n```",
        (1, 0, 0, 0, 0),
        0.0,
        "syntax",
    ),
    ("no block, prose", "I cannot solve this.", (0, 0, 0, 0, 0), 0.0, "syntax"),
]


@pytest.mark.parametrize("case", H0_CASES, ids=[case[0] for case in H0_CASES])
def test_chain_on_humaneval_0(sandbox: Sandbox, case: tuple) -> None:  # type: ignore[type-arg]
    _, response, chain, similarity, stage = case
    (result,) = run(sandbox, H0, [response], code_efficiency=False)
    got = result.components
    assert tuple(got[k] for k in ("format", "syntax", "compile", "runtime", "correct")) == chain
    assert result.info["stage"] == stage
    if similarity is None or isinstance(similarity, str):
        similarity = ratio(similarity or extract(response, HE0).code, H0.reference)
        assert 0 < similarity < 1
    assert got["ast_similarity"] == pytest.approx(similarity, abs=1e-12)


def test_class_solution_is_required_for_a_leetcode_entry_point(sandbox: Sandbox) -> None:
    problem = CodeProblem(
        task_id="inc",
        entry_point="Solution().solve",
        test="def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n",
        reference=IMPL,
    )
    with_class, without = run(
        sandbox,
        problem,
        [f"```python\n{IMPL}\n```", "```python\ndef solve(v):\n    return v + 1\n```"],
        efficiency=False,
    )
    chain = ("format", "syntax", "compile", "runtime", "correct")
    assert with_class.components == {
        **dict.fromkeys(chain, 1.0),
        "ast_similarity": 1.0,
        "efficiency": 0.0,
        "pass_rate": 1.0,
    }
    # no class: format 0, and `Solution` is undefined when the tests call the entry point: runtime 0
    assert [without.components[k] for k in chain] == [0, 1, 1, 0, 0]
    assert without.components["ast_similarity"] == pytest.approx(
        ratio("def solve(v):\n    return v + 1", IMPL), abs=1e-12
    )


SLOW = "    sum(range(400_000))\n"  # ~10 ms of CPU in front of the answer


def test_efficiency_of_faster_equal_and_slower_programs(sandbox: Sandbox) -> None:
    """t_ref: the reference (which burns CPU first) in the same harness; each value must be the formula of the
    measured `t` and `t_ref` in `info`, so faster earns reward, the reference itself about 0, slower 0."""
    plain = "def square(x):\n    return x * x\n"
    reference = f"def square(x):\n{SLOW}    return x * x\n"
    problem = CodeProblem(
        task_id="square",
        entry_point="square",
        test="def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n",
        reference=reference,
    )
    slower = f"def square(x):\n{SLOW * 3}    return x * x\n"
    wrong_fast = "def square(x):\n    return 0\n"
    completions = [f"```python\n{c}\n```" for c in (plain, reference, slower, wrong_fast)]
    # the authors' single run
    faster, equal, slow, wrong = run(sandbox, problem, completions, code_efficiency_mode="paper")
    for result in (faster, equal, slow):
        t, t_ref = result.info["t"], result.info["t_ref"]
        assert result.components["correct"] == 1 and t > 0 and t_ref > 0
        assert result.components["efficiency"] == max(0.0, min(1.0, 1.0 - t / t_ref))
    assert faster.components["efficiency"] > 0.5  # a tenth of the reference's CPU, or so
    assert equal.components["efficiency"] < 0.5  # the reference itself: t ~ t_ref
    assert slow.components["efficiency"] == 0.0  # three times the work
    assert (
        wrong.components["correct"] == 0 and wrong.components["efficiency"] == 0 and "t_ref" not in wrong.info
    )

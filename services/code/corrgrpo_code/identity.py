"""A problem's one identity: its content, what judging it depends on (its `task_id` does not), and the hash of that
content, the problem's name in the store (reference times, shared runs).

The content is a tuple of the problem's own strings, the in-memory key: each string hashes once and keeps its hash,
where a dump of a CodeContests problem (tens of MB of cases) would be redone for every item. The hash is taken once
per distinct problem, when it is prepared (`prepared.py`).
"""

from __future__ import annotations

import hashlib
import json

from corrgrpo_proto.code import AnyProblem, CodeProblem, MbppProblem, StdinProblem

Content = tuple[str, ...]


def problem_content(problem: AnyProblem) -> Content:
    """Every field but `task_id`; the first string names the kind (a check problem's four fields have none, as before
    the other kinds existed). An absent optional string and an empty one judge alike, so they are one content."""
    if isinstance(problem, CodeProblem):
        return problem.prompt, problem.entry_point, problem.test, problem.reference
    if isinstance(problem, StdinProblem):
        cases = (text for case in problem.stdin_cases for text in (case.input, case.output))
        return "stdin", str(problem.time_limit_s), problem.reference or "", *cases
    if isinstance(problem, MbppProblem):
        return "mbpp", problem.test_setup_code, problem.entry_point or "", problem.reference or "", *problem.test_list
    calls = json.dumps([[case.args, case.expected] for case in problem.call_cases])  # data, not hashable as it is
    return "call", problem.prompt, problem.fn_name, str(problem.time_limit_s), problem.reference or "", calls


def content_hash(content: Content) -> str:
    """The content's sha256, as a JSON list. A check problem's is the hash its reference times were always stored
    under (the same list of its four fields)."""
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:32]

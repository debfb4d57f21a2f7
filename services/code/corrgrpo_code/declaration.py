"""The code service, declared once: name, version, port, components, settings, app."""

from __future__ import annotations

from importlib.metadata import version

from corrgrpo_proto import ComponentSpec
from corrgrpo_service.registry import ServiceDeclaration

from .settings import CodeSettings

# The authors' default weights (CorrGRPO code_rl/run.sh); `total` is their weighted sum, unnormalised. Their gating:
# ast_similarity counts only where a reference exists, efficiency only for correct programs; a gated component is 0.
COMPONENTS = (
    ComponentSpec(
        name="format", min=0, max=1, weight=0.05, description="a fenced block, and the code holds `class Solution`/`def f(`"
    ),
    ComponentSpec(name="syntax", min=0, max=1, weight=0.05, description="the extracted code parses"),
    ComponentSpec(name="compile", min=0, max=1, weight=0.05, description="requires syntax; prelude + code compile"),
    ComponentSpec(
        name="runtime", min=0, max=1, weight=0.25, description="requires compile; ran with no error but a failed assertion"
    ),
    ComponentSpec(name="correct", min=0, max=1, weight=0.60, description="requires runtime; every test passes"),
    ComponentSpec(
        name="ast_similarity",
        min=0,
        max=1,
        weight=0.30,
        description="SequenceMatcher ratio of the node-type sequences of code and reference (0 without a reference)",
    ),
    ComponentSpec(name="efficiency", min=0, max=1, weight=0.20, description="correct only: clip(1 - t / t_ref, 0, 1)"),
)

SERVICE = ServiceDeclaration(
    name="code",
    version=version("corrgrpo-code"),
    port=8101,
    components=COMPONENTS,
    settings=CodeSettings,
    app="corrgrpo_code.app:build",
)

"""A step's summary line: every phase that did work is named, however fast; an empty short phase is left
out."""

from __future__ import annotations

import io

from corrgrpo_trainer.progress import StepPhases


def test_a_step_answered_from_the_store_still_names_its_scoring() -> None:
    stream = io.StringIO()
    phases = StepPhases(stream)
    phases.start_step(2, 2)
    phases.begin("generating", "8 completions")
    phases.begin("log-probs")  # no reference model: nothing to do, left out
    phases.begin("scoring")
    phases.scored("code", 8, 0.0)  # every run answered from the store
    phases.begin("updating")  # ended at once: left out too
    line = phases.end_step()
    phases.close()
    assert line.startswith("[train] step 2/2 took ") and line in stream.getvalue()
    # not the empty ones
    assert line.endswith(": generating 0.0 s (8 completions), scoring 0.0 s (code 8 items in 0.0 s)")

"""Settings: one naming rule, one reader of the environment, one source of defaults, tables that cannot
drift."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from corrgrpo_common import ServiceSettings, declared
from corrgrpo_common.settings import env_name
from corrgrpo_devtools.docs import BEGIN, END, drifted, rewritten, table

REPO = Path(__file__).resolve().parents[2]
SERVICES = declared()


@pytest.mark.parametrize("name", list(SERVICES))
def test_a_services_own_settings_are_named_after_it(name: str) -> None:
    settings = SERVICES[name].settings
    own = [field for field in settings.model_fields if field not in ServiceSettings.model_fields]
    assert own, f"{name} declares no settings of its own"
    for field in own:
        assert field.startswith(f"{name}_"), f"{settings.__name__}.{field} must be named {name}_..."
        assert env_name(settings, field) == f"CORRGRPO_{field.upper()}"


def test_shared_settings_belong_to_no_single_service() -> None:
    for field in ServiceSettings.model_fields:
        assert not any(field.startswith(f"{name}_") for name in SERVICES), field
        assert env_name(ServiceSettings, field) == f"CORRGRPO_{field.upper()}"


def python_sources() -> list[Path]:
    return [path for path in (REPO / "services").rglob("*.py") if ".egg-info" not in str(path)]


def test_only_settings_modules_read_the_environment() -> None:
    readers = [
        p
        for p in python_sources()
        if p.name != "settings.py" and re.search(r"os\.environ|getenv\(", p.read_text())
    ]
    assert readers == []


def test_no_service_guesses_where_the_data_lies() -> None:
    guesses = [p for p in python_sources() if re.search(r"""["']shared["']|\.\./shared""", p.read_text())]
    assert guesses == []


def test_renamed_variables_are_read_and_old_ones_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    toolcall, code = SERVICES["toolcall"].settings, SERVICES["code"].settings
    monkeypatch.setenv("CORRGRPO_MAX_CALLS", "2")  # the old name: ignored now
    assert toolcall().parse_caps().max_calls == 64
    monkeypatch.setenv("CORRGRPO_TOOLCALL_MAX_CALLS", "3")
    assert toolcall().parse_caps().max_calls == 3
    monkeypatch.setenv("CORRGRPO_WORKERS", "5")  # the old shared name: ignored now
    assert code().code_workers == (os.cpu_count() or 1)
    monkeypatch.setenv("CORRGRPO_CODE_WORKERS", "7")
    assert code().code_workers == 7


def test_scoring_configs_are_built_from_the_settings_with_the_scorers_defaults() -> None:
    from corrgrpo_code.settings import HARNESS_LIMITS, CodeSettings
    from corrgrpo_toolcall.calls import ParseCaps
    from corrgrpo_toolcall.response import FormatRules
    from corrgrpo_toolcall.settings import ToolCallSettings

    assert CodeSettings().limits() == HARNESS_LIMITS and CodeSettings(code_cpu_s=1).limits().cpu_s == 1
    assert (ToolCallSettings().parse_caps(), ToolCallSettings().format_rules()) == (
        ParseCaps(),
        FormatRules(),
    )


def test_readme_tables_match_the_settings() -> None:
    stale = drifted(write=False)
    assert stale == [], (
        f"run `make docs` (python -m corrgrpo_devtools.docs): {stale} drifted from the Field descriptions"
    )


def test_a_stale_or_missing_table_is_caught() -> None:
    fresh = table(ServiceSettings, ["host"])
    assert "- `CORRGRPO_HOST` = `127.0.0.1`: " in fresh
    stale = f"# x\n\n{BEGIN}\n| old |\n{END}\n\ntail\n"
    assert rewritten(stale, fresh, Path("x")) == f"# x\n\n{fresh}\n\ntail\n"
    with pytest.raises(ValueError, match="needs exactly one"):
        rewritten("# no markers\n", fresh, Path("x"))


def test_an_undocumented_setting_fails_the_docs() -> None:
    class Bare(ServiceSettings):
        bare_thing: int = 1

    with pytest.raises(ValueError, match="no description"):
        table(Bare, ["bare_thing"])

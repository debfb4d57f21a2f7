"""The test helpers of corrgrpo_testing leave nothing behind them."""

from __future__ import annotations

from pathlib import Path

from corrgrpo_testing.servers import start_service


def test_a_started_service_s_log_is_removed_after_it_stops() -> None:
    with start_service("toolcall") as service:
        log = Path(service.log_path)
        # written before it answers
        assert log.is_file() and f"Uvicorn running on {service.url}" in service.log()
    assert not log.exists()

"""ASGI guards in front of every route, one concern a module: bearer auth (`auth`), framing and body size
(`framing`), JSON shape (`json_checks`, `parsed_json`), the in-flight item budget (`admission`) and
cancellation on disconnect (`cancellation`).

They run before FastAPI parses anything, so a hostile body is refused with the kit's error body (401, 413,
400, 422) instead of reaching pydantic or a scorer, and a refusal costs no more than reading the body once.
"""

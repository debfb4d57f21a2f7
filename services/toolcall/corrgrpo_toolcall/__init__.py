"""corrgrpo toolcall reward service."""

"""corrgrpo toy reward service."""

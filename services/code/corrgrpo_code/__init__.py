"""corrgrpo code reward service."""

"""Test support shared by tests/, bench/ and examples/: service processes (`servers`), the advantages oracle."""

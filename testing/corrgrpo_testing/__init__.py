"""Dev support of tests/, bench/ and examples/: service processes (`servers`), the advantages oracle,
prompt rows."""

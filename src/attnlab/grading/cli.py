"""The ``attnlab`` command line (placeholder, grown below)."""

"""What the tests share that is not a test or a fixture (tests/README.md
lists each module); the tests import them as ``helpers.<module>``, with
tests/ on sys.path (pytest's rootdir import)."""

"""What the tests share, one module per job; test modules import it as ``support.<module>``
and never import each other (tests/support/layout.py, checked by tests/test_test_layout.py)."""

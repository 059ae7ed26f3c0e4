"""Helpers shared by the tests, one module per theme.

A test module never imports another test module (``test_*.py`` or a ``conftest.py``): what two
test files both need lives here, under a public name. tests/test_lint.py holds the rule.
"""

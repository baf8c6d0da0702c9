"""Code the tests share: fakes and harnesses that stand in for the parts a
layer's tests do not exercise (importable as `tests.support.*`; the repository
root is on sys.path through tests/conftest.py). Nothing here ships."""

"""The benchmark harness: IEP-113's experiments and the peer stores, side by side.

Entry points: ``python -m bench`` (``bench.cli``) and ``bench.runner.run``. It uses
only pagestore's public API; ``bench.spark`` (the analysis) is a separate package.
"""

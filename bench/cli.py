"""``python -m bench``: parse the command line (``bench.arguments``) and run a subcommand
(``bench.commands``).

Bad options end with exit code 2 and a one-line message (argparse), whether
argparse or the configuration check (``bench.scenarios.resolve``) finds them.
Every subcommand that measures writes Parquet under ``--results`` (the schema:
``bench.schema``, ``docs/results-schema.md``) and prints rich tables;
``docs/bench.md`` has the details.
"""

from __future__ import annotations

import sys

from bench.arguments import base_config, parser, run_config
from bench.commands import COMMANDS
from bench.scenarios import resolve


def main(argv=None) -> int:
    """Parse, check the configuration, run the subcommand; its exit code."""
    p = parser()
    a = p.parse_args(argv)
    try:
        if a.cmd == "run":
            resolve(run_config(a))
        elif a.cmd == "matrix":
            resolve(dict(base_config(a), scenario=a.scenario[0]))
    except ValueError as e:
        p.error(str(e))
    return COMMANDS[a.cmd](a, p)


if __name__ == "__main__":
    sys.exit(main())

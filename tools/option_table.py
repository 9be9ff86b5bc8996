#!/usr/bin/env python
"""Write the option reference of docs/configuration.md from the option table
(langgraph_durable/option_table.py)::

    python tools/option_table.py          # rewrite the generated parts
    python tools/option_table.py --check  # write nothing; exit 1 if they are stale

The generated parts sit between ``<!-- option table: NAME -->`` and
``<!-- end of option table -->`` markers: ``variables`` (the environment
variables `DurableSaver.from_env` reads) and ``reference`` (every keyword,
by group).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph_durable import option_table  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"
PARTS = {"variables": option_table.variables_table, "reference": option_table.reference}
_PART = re.compile(r"(<!-- option table: (\w+) -->\n)(.*?)(<!-- end of option table -->)", re.S)


def generated(text: str) -> str:
    """`text` (the page) with each generated part made anew."""
    found = {m.group(2) for m in _PART.finditer(text)}
    missing = set(PARTS) - found
    if missing:
        raise SystemExit(f"{DOC.relative_to(ROOT)} lacks the markers of: {', '.join(sorted(missing))}")
    return _PART.sub(lambda m: m.group(1) + "\n" + PARTS[m.group(2)]() + "\n" + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is stale")
    opts = parser.parse_args(argv)
    text = DOC.read_text()
    wanted = generated(text)
    if wanted == text:
        return 0
    if opts.check:
        print(f"{DOC.relative_to(ROOT)} is stale: run tools/option_table.py", file=sys.stderr)
        return 1
    DOC.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

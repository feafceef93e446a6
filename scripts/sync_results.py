r"""Keeps the generated tables quoted in RESULTS.md identical to their files under results/.

A quoted table sits between two marker lines naming its file:

  <!-- table: results/single/headline.md -->
  ...the file's text, written by a scripts/run_results.sh stage...
  <!-- /table -->

  python scripts/sync_results.py            # rewrite every block from its file
  python scripts/sync_results.py --check    # exit 1, naming the blocks that differ

The test suite runs the check, so a table edited by hand or left stale fails CI.
"""
import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- table: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def sync(text: str, root: str) -> tuple[str, list[str]]:
  """(text with every block refreshed from its file, paths of the blocks that changed)."""
  changed = []

  def fill(m):
    path = os.path.join(root, m.group("path"))
    if not os.path.isfile(path):
      raise SystemExit(f"RESULTS.md quotes {m.group('path')}, which does not exist: run the "
                       "stage that writes it or remove the block.")
    body = open(path).read()
    body = body if body.endswith("\n") else body + "\n"
    if body != m.group("body"):
      changed.append(m.group("path"))
    return m.group(1) + body + m.group(4)

  return BLOCK.sub(fill, text), changed


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--file", default=os.path.join(REPO, "RESULTS.md"))
  p.add_argument("--check", action="store_true", help="only report; exit 1 if out of date")
  a = p.parse_args(argv)
  text = open(a.file).read()
  new, changed = sync(text, os.path.dirname(os.path.abspath(a.file)))
  if a.check:
    if changed:
      print(f"{a.file} quotes stale tables: {', '.join(changed)}; run scripts/sync_results.py.")
      return 1
    return 0
  if changed:
    with open(a.file, "w") as f:
      f.write(new)
  print(f"refreshed: {', '.join(changed) or 'nothing (in sync)'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())

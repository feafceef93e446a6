r"""The command line of a study's report: its markdown files' tables rebuilt from its records.

The tables are acl_jax/study/reporting.py's, built from the records and the protocol.

  python -m scripts.report            # RESULTS.md's tables, results/PILOTS.md, results/figures/,
                                      # and results/STAGE4.md's (stage 4: BASE, records/base)
  python -m scripts.report --check    # exit 1, naming what differs from the records
  python -m scripts.report --protocol studies/mine.py --records runs/my_study/records \
      --file runs/my_study/REPORT.md  # a study of one's own (README, "Your own study")

A table sits in a report between marker lines naming it (`<!-- table: claims -->` ...
`<!-- /table -->`). This project's reports and tables are studies/papers_report.py's (every
table any protocol gets, and its own), its pilots and figures studies/papers_pilots.py's; a
study of one's own gets the tables any protocol gets (`reporting.TABLES`).
tests/test_records.py runs the check.
"""
import argparse
import os
import sys

from acl_jax import errors
from acl_jax.study import loader, records, reporting
from scripts import sweep
from studies import papers_pilots, papers_report

REPO = records.REPO
BASE = "studies.papers:BASE"  # stage 4's protocol, whose report is results/STAGE4.md


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--protocol", default=loader.DEFAULT,
                  help="the study's Protocol: module:NAME or a .py file (default: this "
                  "project's, studies.papers:PAPERS)")
  ap.add_argument("--file", action="append",
                  help="a report whose table blocks to rebuild (repeatable); default: this "
                  "project's REPORTS, with its own protocol")
  ap.add_argument("--pilots", default=papers_pilots.PILOTS_MD,
                  help="the pilots' report, written whole")
  ap.add_argument("--records", default="",
                  help="the records folder (default: this project's results/records, with "
                  "its own protocol)")
  ap.add_argument("--check", action="store_true",
                  help="only compare; exit 1 naming the tables that differ from the records")
  ap.add_argument("--no_figures", action="store_true")
  a = ap.parse_args(argv)
  p = sweep.load_protocol(a.protocol)
  own = a.protocol == loader.DEFAULT
  if not (own or (a.file and a.records)):
    raise SystemExit(f"--protocol {a.protocol}: name its records folder (--records) and the "
                     "report(s) to fill (--file: a markdown file with <!-- table: NAME --> "
                     "blocks; README, \"Your own study\").")
  if a.records and not os.path.isdir(a.records):  # else read as a study with no run
    raise errors.UserError(f"--records {a.records}: no such folder; name the folder the "
                           "study's sweep records its runs in.")
  rs = records.read_all(a.records or records.RECORDS)
  tables = papers_report.TABLES if own else reporting.TABLES
  # The pilots' report is written for a protocol that has pilots.
  pilots = papers_pilots.pilots_md(p, rs) if p.pilots and a.pilots else None
  try:
    changed = reporting.update(p, a.file or papers_report.REPORTS, rs, tables, check=a.check)
  except FileNotFoundError as e:
    raise SystemExit(f"--file {e}") from None
  if own and not (a.file or a.records):  # stage 4: its own protocol, records and report
    changed += reporting.update(sweep.load_protocol(BASE), papers_report.BASE_REPORTS,
                                records.read_all(papers_report.BASE_RECORDS),
                                papers_report.BASE_TABLES, check=a.check)
  old = open(a.pilots).read() if pilots is not None and os.path.isfile(a.pilots) else None
  if a.check:
    changed += [os.path.relpath(a.pilots, REPO)] if pilots != old else []
    if changed:
      print(f"tables that differ from the records: {', '.join(changed)}; run "
            "scripts/report.py.")
      return 1
    return 0
  if pilots != old:
    with open(a.pilots, "w") as f:
      f.write(pilots)
    changed.append(os.path.relpath(a.pilots, REPO))
  print(f"rewritten: {', '.join(changed) or 'none (in sync)'}")
  if not a.no_figures and p.pilots:
    for path in papers_pilots.figures(p, rs):
      print(f"wrote {os.path.relpath(path, REPO)}")
  return 0


if __name__ == "__main__":
  sys.exit(sweep.user_errors(main))

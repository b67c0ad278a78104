"""ncu's CSV source page of one kernel (`ncu -i R.ncu-rep --page source --csv --print-source sass`),
read once for scripts/ncu-sass-summary.py and scripts/ncu-lines.py."""
import csv
import re
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(text):
    """The opcode of a SASS line, without its predicate and modifiers (`@!P0 BRA.U ...` -> `BRA`)."""
    text = re.sub(r"^@!?U?P\w+\s+", "", text.strip())
    return text.split()[0].split(".")[0] if text else ""


class SourcePage:
    """cols: the header; body: one row an instruction, in address order; src, samples, executed:
    the columns of the SASS text, the stall samples and the instructions executed."""

    def __init__(self, path):
        rows = list(csv.reader(open(path, newline="")))
        head = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
        if head is None:
            sys.exit("no source page in " + path + " (see the .log next to it)")
        self.cols = rows[head]
        self.src = self.cols.index("Source")
        self.samples = next(i for i, c in enumerate(self.cols) if c.startswith("Warp Stall Sampling (All"))
        self.executed = self.cols.index("Instructions Executed")
        self.body = [r for r in rows[head + 1:] if len(r) > max(self.samples, self.executed, self.src)]

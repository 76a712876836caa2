"""What the report tests share: a committed results JSON, one section of the lab report
(results/README.md) with its whitespace flattened, and a 95 % t interval computed by hand
from a printed table of Student's t, independent of the lab's statistics code."""
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T975 = {4: 2.776, 5: 2.571, 10: 2.228, 11: 2.201}  # t_{0.975, df}, from a printed table


def load(name):
    """results/<name>.json."""
    return json.load(open(os.path.join(ROOT, "results", f"{name}.json"), encoding="utf-8"))


def section(heading, flat=True):
    """The lab report's section that starts with '## <heading>', up to the next one."""
    s = open(os.path.join(ROOT, "results", "README.md"), encoding="utf-8").read()
    start = s.index(f"## {heading}")
    text = s[start:s.index("\n## ", start + 1)]
    return " ".join(text.split()) if flat else text


def ci(xs):
    """Mean and the 95 % t half-width of xs."""
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, T975[len(xs) - 1] * sd / math.sqrt(len(xs))

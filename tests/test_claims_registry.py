"""One record per objective: the scoreboard's description of its clips names no objective
that the registry (lab/objectives.py) already says has none; it points to the registry."""
import re

from lab import objectives
from lab.experiments import scoreboard


def test_the_scoreboard_reads_the_unclipped_objectives_from_the_registry():
    unclipped = [n for n, o in objectives.OBJECTIVES.items() if o.clip == "none"]
    assert "sapo" in unclipped and len(unclipped) >= 3
    doc = " ".join(scoreboard.__doc__.split())
    clips = doc[doc.index("Clips:"):doc.index("clip_cov and kl_cov use")]
    assert not [n for n in unclipped if re.search(rf"\b{n}\b", clips)]
    assert 'registered without one (``clip="none"`` in lab/objectives.py' in clips
    assert all(scoreboard.clip_of(n)[0] == "none" for n in unclipped)

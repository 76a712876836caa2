import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
torch.set_num_threads(1)
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # experiments/probes.py, common.py

"""A script with a syntax error on line 9: Python never runs it.

    python syntax_error.py
"""

import torch

model = torch.nn.Linear(4, 4)
for step in range(10)
    model(torch.randn(2, 4)).sum().backward()

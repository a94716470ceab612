"""A training loop whose settings the trial stage may change, recording at every step what they were.

    python trial_settings.py --steps 300 --threads 8 --anomaly --log settings.json

At its end it writes, per step, the intra-op threads, whether anomaly detection and grad mode were on, and the
optimizer's foreach flag, so a test can tell which steps ran with a trial's setting and that the script's last
steps ran with its own.
"""

import argparse
import json

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--anomaly", action="store_true")
    parser.add_argument("--log", default="")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.anomaly:
        torch.autograd.set_detect_anomaly(True, check_nan=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 128)
    seen = []
    for _ in range(args.steps):
        # torch._C's own: the trial's anomaly knob answers torch.is_anomaly_enabled with what the script asked for
        seen.append({"threads": torch.get_num_threads(), "anomaly": torch._C.is_anomaly_enabled(),
                     "check_nan": torch._C.is_anomaly_check_nan_enabled(), "grad": torch.is_grad_enabled(),
                     "foreach": opt.param_groups[0]["foreach"]})
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    if args.log:
        with open(args.log, "w") as f:
            json.dump(seen, f)


if __name__ == "__main__":
    main()

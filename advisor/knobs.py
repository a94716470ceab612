"""The settings the trial stage can try on the user's own steps: one :class:`Knob` per setting.

A rule whose fix is a setting names its knob (``try: intra_op_threads``); the
trial stage then runs the script again and alternates the setting in blocks of
steps (:mod:`advisor.collect.trial_blocks`), and the report gives the measured
gain beside the rule's estimate. What each knob does inside the user's process,
and how it is undone, is in :mod:`advisor.collect.trial_knobs`; this module is
what the engine, the lint and the report need to know about it, without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOBS", "Knob", "knob"]


@dataclass(frozen=True)
class Knob:
    name: str
    #: what the trial sets, as the report says it: "intra-op threads at the usable cores"
    title: str
    #: the line to put in the user's code for the same change
    line: str
    #: the change may alter results (TF32, a fused optimizer): tried only with --trial-numerics
    numerics: bool = False
    #: what else it may change besides speed (memory, behaviour), for the report
    besides: str = ""
    #: only where the framework run saw a GPU
    gpu: bool = False


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("intra_op_threads", "intra-op threads cut to the usable cores (less the other ranks')",
         "torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get('LOCAL_WORLD_SIZE', '1'))))",
         besides="parallel reductions may add up in another order (last-bit differences)"),
    Knob("no_grad", "the inference loop run without autograd (torch.no_grad)",
         "with torch.inference_mode():  # around the inference loop",
         besides="the outputs no longer carry autograd history: code that calls backward on them fails"),
    Knob("anomaly_detection_off", "anomaly detection switched off",
         "torch.autograd.set_detect_anomaly(False)",
         besides="a NaN in the backward is no longer traced to the forward operator that made it"),
    Knob("optimizer_foreach", "the optimizer's multi-tensor implementation (foreach=True)",
         "optimizer = torch.optim.<Optimizer>(params, ..., foreach=True)",
         besides="more temporary memory in the step: intermediates for all parameters of a group at once"),
    Knob("optimizer_fused", "the optimizer's fused implementation (fused=True)",
         "optimizer = torch.optim.<Optimizer>(params, ..., fused=True)", numerics=True,
         besides="the update is computed by one kernel; results may differ in the last bits"),
    Knob("zero_grad_set_to_none", "gradients released, not zeroed (zero_grad(set_to_none=True))",
         "optimizer.zero_grad(set_to_none=True)",
         besides="p.grad is None between steps: code that reads it before the backward must allow that"),
    Knob("tf32", "TF32 for fp32 matmuls and convolutions",
         "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True", numerics=True,
         besides="matmul inputs rounded to a 10-bit mantissa (fp32 accumulation)", gpu=True),
    Knob("cudnn_benchmark", "cuDNN autotuning of convolution algorithms (cudnn.benchmark)",
         "torch.backends.cudnn.benchmark = True",
         besides="the first step of each new input shape is slower while the algorithms are timed", gpu=True),
)}


def knob(name: str) -> Knob:
    """The knob of that name; KeyError names the known ones."""
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"no trial knob {name!r}; the knobs are {', '.join(KNOBS)}") from None

"""The pieces every generated script is built from: models, the loop that drives a step, settings written several
ways, and the step-time harness.

A family describes one program as a ``Prog`` (which model, which loop, which lines make the step, where the
problem sits) and ``render`` writes it out as a standalone script. The problem and its fix differ only in the
parts a family sets; everything else is shared, so a variant and its twin differ by the fix alone.

Every script prints, at its end, one line ``VARIANT_STEP_MS [...]``: the wall time of each step in ms, from
``_tick()`` at the end of each step (``bench/variants/measure.py`` reads it). ``VARIANT_STEPS`` sets the number of
steps (default 60: the advisor's 5 skipped + 3 warm-up + 5 recorded + 5 timed steps, and room for the step finder).
"""

from __future__ import annotations

import ast
import random
import textwrap
from dataclasses import dataclass, field

HARNESS = '''\
STEPS = int(os.environ.get("VARIANT_STEPS", "60"))
_TICKS = [time.perf_counter()]


def _tick() -> None:
    """A step ended: the benchmark's own timing, not part of the program under test."""
    _TICKS.append(time.perf_counter())


def _report() -> None:
    ms = [round((b - a) * 1e3, 4) for a, b in zip(_TICKS, _TICKS[1:])]
    print("VARIANT_STEP_MS " + json.dumps(ms), flush=True)
'''

MODELS = ("mlp", "cnn", "lstm", "gru", "transformer")


@dataclass
class Model:
    """A classifier whose forward has the features ``h`` (batch, feat) before its head, where a family may add
    lines (``feat``) and methods (``methods``)."""

    kind: str
    name: str
    init: list[str]          # lines of __init__ after super().__init__()
    body: list[str]          # forward lines that make h (batch, feat) from x
    feat: int
    classes: int
    batch: int
    x_shape: str             # source of the input's shape, batch first
    args: str = ""           # the constructor's arguments


def model(kind: str, rng: random.Random, *, scale: float = 1.0, batch: int | None = None, depth: int = 2) -> Model:
    """One of MODELS with sizes drawn from ``rng``; ``scale`` widens it (a bigger step), ``depth`` deepens it (more,
    smaller operators), ``batch`` fixes the batch."""
    c = rng.choice((10, 16, 20))
    if kind == "mlp":
        d, h = rng.choice((64, 128)), int(rng.choice((192, 384)) * scale)
        b = batch or rng.choice((64, 128))
        return Model(kind, "MLPNet", [
            f"self.body = nn.Sequential(nn.Linear({d}, {h}), nn.ReLU(),",
            f"                          *[layer for _ in range({depth - 1}) for layer in (nn.Linear({h}, {h}), nn.ReLU())])",
            f"self.head = nn.Linear({h}, {c})"], ["h = self.body(x)"], h, c, b, f"({b}, {d})")
    if kind == "cnn":
        s, w = rng.choice((16, 20)), int(rng.choice((16, 24)) * scale)
        b = batch or rng.choice((16, 32))
        return Model(kind, "ConvNet", [
            f"self.conv1 = nn.Conv2d(3, {w}, 3, padding=1)",
            f"self.conv2 = nn.Conv2d({w}, {2 * w}, 3, stride=2, padding=1)",
            *([f"self.convs = nn.Sequential(*[nn.Sequential(nn.Conv2d({2 * w}, {2 * w}, 3, padding=1), nn.ReLU())",
               f"                            for _ in range({depth - 2})])"] if depth > 2 else []),
            f"self.head = nn.Linear({2 * w}, {c})"],
            ["h = torch.relu(self.conv2(torch.relu(self.conv1(x))))", *(["h = self.convs(h)"] if depth > 2 else []),
             "h = h.mean(dim=(2, 3))"],
            2 * w, c, b, f"({b}, 3, {s}, {s})")
    if kind in ("lstm", "gru"):
        d, h, t = 32, int(rng.choice((64, 96)) * scale), rng.choice((12, 16))
        b = batch or rng.choice((32, 64))
        cell = "LSTM" if kind == "lstm" else "GRU"
        pick = "h = seq[:, -1]" if kind == "lstm" else "h = seq.mean(dim=1)"
        layers = f", num_layers={depth // 2}" if depth > 2 else ""
        return Model(kind, f"{cell}Net", [f"self.rnn = nn.{cell}({d}, {h}, batch_first=True{layers})",
                                          f"self.head = nn.Linear({h}, {c})"],
                     ["seq, _ = self.rnn(x)", pick], h, c, b, f"({b}, {t}, {d})")
    if kind == "transformer":
        d, e, t = 32, int(rng.choice((64, 96)) * scale), rng.choice((16, 24))
        b = batch or rng.choice((16, 32))
        return Model(kind, "TinyTransformer", [
            f"self.embed = nn.Linear({d}, {e})",
            f"layer = nn.TransformerEncoderLayer({e}, 4, {2 * e}, dropout=0.0, batch_first=True)",
            f"self.encoder = nn.TransformerEncoder(layer, {depth}, enable_nested_tensor=False)",
            f"self.head = nn.Linear({e}, {c})"],
            ["h = self.encoder(self.embed(x)).mean(dim=1)"], e, c, b, f"({b}, {t}, {d})")
    raise ValueError(f"unknown model {kind!r}")


def model_src(m: Model, methods: list[str] = (), feat: list[str] = ()) -> str:
    """The model's class: ``feat`` lines run on h before the head, ``methods`` are added to the class."""
    lines = [f"class {m.name}(nn.Module):", f"    def __init__(self{m.args}) -> None:",
             "        super().__init__()", *(f"        {line}" for line in m.init), ""]
    for method in methods:
        lines += [textwrap.indent(textwrap.dedent(method).strip("\n"), "    "), ""]
    lines += ["    def forward(self, x: torch.Tensor) -> torch.Tensor:", *(f"        {line}" for line in m.body),
              *(f"        {line}" for line in feat), "        return self.head(h)"]
    return "\n".join(lines) + "\n"


@dataclass
class Setting:
    """A value the program reads, written one of several ways; ``expr`` is how the code refers to it."""

    expr: str
    defs: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)


SETTING_STYLES = ("literal", "const", "config", "argparse", "env", "dict")


def setting(style: str, key: str, value: str, kind: str = "int") -> Setting:
    """``value`` is Python source of an int or bool (``kind``), read as written by ``style``: in place, a module
    constant, a dataclass config, an argparse default, an environment variable with a default, or a dict."""
    if style == "literal":
        return Setting(value)
    if style == "const":
        return Setting(key.upper(), defs=[f"{key.upper()} = {value}\n"])
    if style == "config":
        hint = "bool" if kind == "bool" else "int"
        return Setting(f"cfg.{key}", defs=["@dataclass", "class TrainConfig:", f"    {key}: {hint} = {value}\n"],
                       setup=["cfg = TrainConfig()"], imports=["from dataclasses import dataclass"])
    if style == "argparse":
        flag = "--" + key.replace("_", "-")
        default = f"int({value})"
        expr = f"bool(args.{key})" if kind == "bool" else f"args.{key}"
        return Setting(expr, setup=["parser = argparse.ArgumentParser()",
                                    f"parser.add_argument({flag!r}, type=int, default={default})",
                                    "args, _ = parser.parse_known_args()"], imports=["import argparse"])
    if style == "env":
        name = "TRAIN_" + key.upper()
        if kind == "bool":
            return Setting(f'os.environ.get("{name}", str(int({value}))) == "1"')
        return Setting(f'int(os.environ.get("{name}", str({value})))')
    if style == "dict":
        return Setting(f'CONFIG["{key}"]', defs=[f'CONFIG = {{"{key}": {value}}}\n'])
    raise ValueError(f"unknown setting style {style!r}")


DRIVERS = ("plain", "while", "function", "loader", "eval_first", "closure", "hand", "accelerate", "lightning")
EVAL_STYLES = ("no_grad", "function", "inference_mode", "loader")


@dataclass
class Prog:
    """One training (or inference) program, in parts."""

    doc: str
    model: Model
    driver: str = "plain"
    methods: list[str] = field(default_factory=list)      # added to the model class
    feat: list[str] = field(default_factory=list)         # forward lines on h before the head
    imports: list[str] = field(default_factory=list)
    pre_import: list[str] = field(default_factory=list)   # lines before `import torch` (after `import os`)
    defs: list[str] = field(default_factory=list)         # module-level code after the model
    setup_early: list[str] = field(default_factory=list)  # main(), before the model is built
    setup: list[str] = field(default_factory=list)        # main(), after the optimizer, before the loop
    optimizer: str | None = "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)"
    zero: list[str] | None = None
    out: list[str] = field(default_factory=lambda: ["out = model(x)"])
    loss: list[str] = field(default_factory=lambda: ["loss = nn.functional.cross_entropy(out, y)"])
    backward: list[str] | None = None
    update: list[str] | None = None
    post: list[str] = field(default_factory=list)         # after the update, inside the step
    step_ctx: str | None = None                           # a `with` around each step's body
    loader: list[str] | None = None                       # lines that make `loader` (else built from batches)
    eval_style: str = "no_grad"
    eval_batches: int = 30
    n_batches: int = 4
    lr: str = "0.01"
    wrap_loop: str | None = None                          # a `with` around the whole loop
    model_ctor: str | None = None                         # how main() builds the model (default: Name())
    class_src: str | None = None                          # the model's class, written by the family
    feed: str = "batches"                                 # "loader": every loop takes its batches from `loader`
    eval_first: bool = False                              # an evaluation pass before training, whatever the loop
    closure_form: str = "nested"                          # nested | partial | callable
    finish: list[str] = field(default_factory=list)       # main(), after the loop
    custom_loop: list[str] | None = None                  # main()'s loop, written by the family
    after_batches: list[str] = field(default_factory=list)  # main(), right after the batches are made
    trainer_args: str = ""                                # more arguments of Lightning's Trainer

    def settings(self, *items: Setting) -> list[str]:
        """Adds the settings' module code and imports; returns their setup lines for main()."""
        lines: list[str] = []
        for s in items:
            block = "\n".join(s.defs)
            if block and block not in self.defs:
                self.defs.append(block)
            self.imports += [i for i in s.imports if i not in self.imports]
            lines += [line for line in s.setup if line not in lines]
        return lines


def _indent(lines: list[str], n: int) -> list[str]:
    pad = " " * n
    return [pad + line if line else line for line in lines]


def _train_body(p: Prog) -> list[str]:
    zero = p.zero if p.zero is not None else (["model.zero_grad()"] if p.driver == "hand"
                                               else ["optimizer.zero_grad()"])
    backward = p.backward or (["accelerator.backward(loss)"] if p.driver == "accelerate" else ["loss.backward()"])
    if p.update is not None:
        update = p.update
    elif p.driver == "hand":
        update = ["with torch.no_grad():", "    for p in model.parameters():", f"        p.add_(p.grad, alpha=-{p.lr})"]
    else:
        update = ["optimizer.step()"]
    body = [*zero, *p.out, *p.loss, *backward, *update, *p.post]
    if p.step_ctx:
        body = [f"with {p.step_ctx}:", *_indent(body, 4)]
    return body


def _closure_step(p: Prog) -> tuple[list[str], list[str]]:
    """(module-level defs, the step's lines) of a step that hands the optimizer a closure."""
    zero = p.zero if p.zero is not None else ["optimizer.zero_grad()"]
    inner = [*zero, *p.out, *p.loss, *(p.backward or ["loss.backward()"]), "return loss"]
    if p.step_ctx:
        inner = [f"with {p.step_ctx}:", *_indent(inner, 4)]
    if p.closure_form == "partial":
        defs = ["def closure_fn(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:",
                *_indent(inner, 4), ""]
        return defs, ["loss = optimizer.step(functools.partial(closure_fn, model, optimizer, x, y))", *p.post]
    if p.closure_form == "callable":
        defs = ["class LossClosure:", "    def __init__(self, model: nn.Module, optimizer) -> None:",
                "        self.model, self.optimizer = model, optimizer", "        self.x = self.y = None", "",
                "    def __call__(self) -> torch.Tensor:",
                "        model, optimizer, x, y = self.model, self.optimizer, self.x, self.y", *_indent(inner, 8), ""]
        return defs, ["closure.x, closure.y = x, y", "loss = optimizer.step(closure)", *p.post]
    return [], ["def closure():", *_indent(inner, 4), "loss = optimizer.step(closure)", *p.post]


def _eval_pass(p: Prog) -> tuple[list[str], list[str]]:
    """(module-level defs, main lines) of an evaluation pass over the batches before training."""
    n = p.eval_batches
    if p.eval_style == "function":
        return (["@torch.no_grad()", "def evaluate(model: nn.Module, batches: list) -> float:", "    model.eval()",
                 "    correct = 0", "    for x, y in batches:", "        correct += int((model(x).argmax(dim=1) == y).sum())",
                 "    model.train()", "    return correct / sum(len(y) for _, y in batches)\n"],
                [f"accuracy = evaluate(model, [batches[i % len(batches)] for i in range({n})])",
                 'print(f"accuracy before training {accuracy:.3f}")'])
    if p.eval_style == "loader":
        return ([], ["model.eval()", "eval_loader = DataLoader(TensorDataset(*map(torch.cat, zip(*batches))), "
                     f"batch_size={p.model.batch})", "losses = []", "with torch.no_grad():",
                     f"    for _ in range({max(1, n // p.n_batches)}):", "        for x, y in eval_loader:",
                     "            losses.append(nn.functional.cross_entropy(model(x), y).item())",
                     "model.train()", 'print(f"eval loss {sum(losses) / len(losses):.3f}")'])
    ctx = "torch.inference_mode()" if p.eval_style == "inference_mode" else "torch.no_grad()"
    return ([], ["model.eval()", "correct = 0", f"with {ctx}:", f"    for i in range({n}):",
                 "        x, y = batches[i % len(batches)]", "        correct += int((model(x).argmax(dim=1) == y).sum())",
                 "model.train()", 'print(f"correct before training: {correct}")'])


def _loop(p: Prog) -> tuple[list[str], list[str]]:
    """(module-level defs, main lines) of the loop that drives the steps."""
    defs: list[str] = []
    lines: list[str] = []
    if p.driver == "eval_first" or p.eval_first:
        defs, lines = _eval_pass(p)
    if p.feed == "loader" and p.driver != "loader":
        lines.append("batch_iter = iter(loader)")
        pick = ["try:", "    x, y = next(batch_iter)", "except StopIteration:  # a new epoch",
                "    batch_iter = iter(loader)", "    x, y = next(batch_iter)"]
    else:
        pick = ["x, y = batches[step % len(batches)]"]
    if p.driver in ("plain", "accelerate", "hand", "eval_first"):
        return defs, lines + ["for step in range(STEPS):", *_indent(pick + _train_body(p) + ["_tick()"], 4)]
    if p.driver == "while":
        return defs, lines + ["step = 0", "while step < STEPS:",
                              *_indent(pick + _train_body(p) + ["_tick()", "step += 1"], 4)]
    if p.driver == "function":
        return defs, lines + ["def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:",
                              *_indent(_train_body(p) + ["return loss"], 4), "",
                              "for step in range(STEPS):", *_indent(pick + ["loss = train_step(x, y)", "_tick()"], 4)]
    if p.driver == "loader":
        return defs, lines + ["step = 0", "for epoch in range(1_000_000):", "    for x, y in loader:",
                              *_indent(_train_body(p) + ["_tick()", "step += 1", "if step >= STEPS:", "    break"], 8),
                              "    if step >= STEPS:", "        break"]
    if p.driver == "closure":
        cdefs, step = _closure_step(p)
        if p.closure_form == "callable":
            lines.append("closure = LossClosure(model, optimizer)")
        return defs + cdefs, lines + ["for step in range(STEPS):", *_indent(pick + step + ["_tick()"], 4)]
    if p.driver == "infer":
        return defs, lines + ["for step in range(STEPS):", *_indent(pick + p.out + p.post + ["_tick()"], 4)]
    raise ValueError(f"unknown driver {p.driver!r}")


def _lightning(p: Prog) -> tuple[list[str], list[str]]:
    out = [line.replace("model(", "self.net(") for line in p.out]
    opt = (p.optimizer or "").replace("model.parameters()", "self.parameters()")
    defs = ["class LitModule(L.LightningModule):", "    def __init__(self, net: nn.Module) -> None:",
            "        super().__init__()", "        self.net = net", "",
            "    def training_step(self, batch, batch_idx):", "        x, y = batch",
            *_indent(out + p.loss, 8), "        return loss", "",
            "    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:", "        _tick()", "",
            "    def configure_optimizers(self):", f"        return {opt}\n"]
    lines = ["trainer = L.Trainer(max_steps=STEPS, accelerator=\"cpu\", devices=1, logger=False,",
             "                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False"
             f"{p.trainer_args})",
             "trainer.fit(LitModule(model), loader)"]
    return defs, lines


def render(p: Prog) -> str:
    """The whole script."""
    imports = list(p.imports)
    if (p.driver in ("loader", "lightning") or p.loader
            or p.eval_style == "loader" and (p.driver == "eval_first" or p.eval_first)):
        imports.append("from torch.utils.data import DataLoader, TensorDataset")
    if p.driver == "closure" and p.closure_form == "partial":
        imports.append("import functools")
    if p.driver == "accelerate":
        imports.append("from accelerate import Accelerator")
    if p.driver == "lightning":
        imports.append("import lightning as L")
    std = sorted({i for i in imports if i.startswith("import ") and "torch" not in i and "lightning" not in i}
                 | {"import json", "import os", "import time"})
    third = [i for i in dict.fromkeys(imports) if i not in std]
    frm = [i for i in third if i.startswith("from dataclasses") or i.startswith("from functools")]
    third = [i for i in third if i not in frm]
    head = [f'"""{p.doc}"""', ""]
    if p.pre_import:
        head += ["import os", "", *p.pre_import, ""]
    head += [*std, *frm, "", "import torch", "from torch import nn", *third, "", "", HARNESS, ""]
    if p.custom_loop is not None:
        loop_defs, loop = [], p.custom_loop
    else:
        loop_defs, loop = _lightning(p) if p.driver == "lightning" else _loop(p)
    main = ["torch.manual_seed(0)", *p.setup_early, f"model = {p.model_ctor or p.model.name + '()'}",
            f"batches = [(torch.randn{p.model.x_shape}, torch.randint(0, {p.model.classes}, ({p.model.batch},)))",
            f"           for _ in range({p.n_batches})]"]
    if p.optimizer and p.driver != "lightning":
        main.append(f"optimizer = {p.optimizer}")
    if p.loader:
        main += p.loader
    elif p.driver in ("loader", "lightning"):
        main += ["loader = DataLoader(TensorDataset(*map(torch.cat, zip(*batches))), "
                 f"batch_size={p.model.batch}, shuffle=True)"]
    if p.driver == "accelerate" and p.feed == "loader":
        main += ["accelerator = Accelerator(cpu=True)",
                 "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"]
    elif p.driver == "accelerate":
        main += ["accelerator = Accelerator(cpu=True)", "model, optimizer = accelerator.prepare(model, optimizer)"]
    main += p.setup
    if p.wrap_loop:
        main += [f"with {p.wrap_loop}:", *_indent(loop, 4)]
    else:
        main += loop
    main += [*p.finish, "_report()"]
    parts = ["\n".join(head), p.class_src or model_src(p.model, p.methods, p.feat), ""]
    parts += [d if d.endswith("\n") else d for d in p.defs]
    if loop_defs:
        parts.append("\n".join(loop_defs))
    parts += ["", "def main() -> None:", "\n".join(_indent(main, 4)), "", "",
              'if __name__ == "__main__":', "    main()", ""]
    src = "\n".join(parts)
    return "\n".join(line.rstrip() for line in src.splitlines()) + "\n"


def shape_of(src: str) -> str:
    """The script's syntax tree with every constant blanked: two scripts that differ only in sizes or texts give
    the same shape."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            node.value = None
    return ast.dump(tree, annotate_fields=False)

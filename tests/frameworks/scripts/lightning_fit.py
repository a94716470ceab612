"""A LightningModule trained with `Trainer.fit`, written the way Lightning's docs show it.

A small convolutional classifier on random 28x28 images built in memory.

Automatic optimization: Lightning calls `optimizer.step(closure)`, and the
closure runs `training_step` (the forward), `zero_grad` and the backward, so
both passes run inside the optimizer's step. With ``--val-every N`` it also
validates on four batches every N training batches (``val_check_interval``),
the validation loop running between two training steps.

With ``--manual``, manual optimization as Lightning's docs show it (GANs, custom
schedules): ``training_step`` runs ``zero_grad``, ``manual_backward`` and
``optimizer.step()`` itself, and Lightning hands the step a closure that does
nothing.

    python lightning_fit.py --max-steps 40 [--val-every 4] [--manual]
"""

import argparse

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(L.LightningModule):
    def __init__(self, classes: int = 10, lr: float = 1e-3, manual: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = not manual
        self.model = nn.Sequential(
            nn.Conv2d(1, 16, 3), nn.ReLU(),
            nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 12 * 12, 64), nn.ReLU(),
            nn.Linear(64, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return None

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--val-every", type=int, default=0, help="validate every N training batches (0: never)")
    parser.add_argument("--manual", action="store_true", help="manual optimization (automatic_optimization=False)")
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    samples = args.batch_size * args.max_steps
    data = TensorDataset(torch.randn(samples, 1, 28, 28), torch.randint(0, 10, (samples,)))
    train_loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    validation = {}
    if args.val_every:
        held_out = args.batch_size * 4
        val_data = TensorDataset(torch.randn(held_out, 1, 28, 28), torch.randint(0, 10, (held_out,)))
        validation = {"val_dataloaders": DataLoader(val_data, batch_size=args.batch_size)}
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_steps=args.max_steps, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        val_check_interval=args.val_every or None, limit_val_batches=4 if args.val_every else None,
    )
    trainer.fit(LitClassifier(manual=args.manual), train_loader, **validation)


if __name__ == "__main__":
    main()

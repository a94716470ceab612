"""Fine-tunes a tiny BERT classifier with the HF `Trainer`, the way the transformers docs show it.

The model is built from a `BertConfig` (no download) and the dataset is
random token ids in memory. `Trainer.training_step` runs the forward and
`accelerator.backward(loss)`; the optimizer steps after it.

    python hf_trainer.py --max-steps 40
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomTextDataset(Dataset):
    """Token ids, attention masks and labels, as a tokenized dataset would give them."""

    def __init__(self, samples: int, seq_len: int, vocab_size: int, classes: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.input_ids = torch.randint(0, vocab_size, (samples, seq_len), generator=gen)
        self.labels = torch.randint(0, classes, (samples,), generator=gen)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.input_ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    config = BertConfig(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=128, num_labels=2)
    model = BertForSequenceClassification(config)
    train_dataset = RandomTextDataset(args.batch_size * args.max_steps, 64, config.vocab_size, config.num_labels)
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir, use_cpu=True, per_device_train_batch_size=args.batch_size,
            max_steps=args.max_steps, learning_rate=5e-5, save_strategy="no", report_to="none",
            logging_strategy="no", disable_tqdm=True, seed=0,
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)
        trainer.train()


if __name__ == "__main__":
    main()

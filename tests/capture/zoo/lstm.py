"""A tiny LSTM language model as users write it: argparse, an nn.LSTM, a seeded corpus, Adam
and a step schedule, the loss printed (tests/capture)."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LM(nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, num_layers=layers, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        h, _ = self.rnn(self.emb(idx))
        return self.head(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    corpus = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(a.seed))
    model = LM(vocab=20, d=12, layers=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(a.steps):
        i = step * 10
        x, y = corpus[i:i + 32].view(4, 8), corpus[i + 1:i + 33].view(4, 8)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step} loss {loss.item()!r}")


if __name__ == "__main__":
    main()

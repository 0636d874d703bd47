#!/usr/bin/python3
"""gpt-mini on the English text of Debian's fortunes package: Tessera against PyTorch.

Trains the zoo's gpt-mini (a causal character-level transformer, 834,432 parameters) with
`tessera train --model gpt-mini --data fortunes`, and the same model written in PyTorch
for the same steps on the same windows, and compares their validation losses (mean cross
entropy per character, nats, over the held-out windows, dropout off).

Same work on both sides: the corpus as data/Text.cpp reads it (the package's text files in
sorted order, entries split at lines holding only '%', every 10th entry held out, bytes
over 127 dropped; the script checks that its character counts equal Tessera's), windows of
64 ids, batch 64 in a fresh random order each epoch, AdamW (lr 1e-3, betas 0.9/0.999,
decay 0.01 on the parameters of 2 or more dims), dropout 0.1, Tessera's initialisation
(token and position tables N(0, 0.02), Linear weights Xavier-uniform, biases 0), and
--threads threads on both sides. The batch orders differ (each side's own generator).

Usage: tools/bench/gpt_fortunes.py [--tessera build/tools/tessera/tessera] [--epochs 2]
       [--threads 2] [--bar 0.03]
Exits 1 when Tessera's last validation loss is more than --bar (relative) above PyTorch's.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time

FORTUNES = "/usr/share/games/fortunes"
T, VOCAB, DIM, DEPTH, HEADS, P = 64, 128, 128, 4, 4, 0.1


def corpus(path=FORTUNES, every=10):
    """(train ids, held-out ids) as data/Text.cpp's readTextCorpus makes them."""
    entries = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        data = open(full, "rb").read()
        if b"\0" in data:
            continue
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
        percent = b"%" in lines
        cur = b""

        def flush(cur):
            cur = cur.lstrip(b"\n")
            while len(cur) >= 2 and cur.endswith(b"\n\n"):
                cur = cur[:-1]
            if cur:
                entries.append(cur)

        for ln in lines:
            if (ln == b"%") if percent else (ln.strip(b" \t") == b""):
                flush(cur)
                cur = b""
            else:
                cur += ln + b"\n"
        flush(cur)
    parts = ([], [])
    for i, e in enumerate(entries):
        part = parts[1] if (i + 1) % every == 0 else parts[0]
        if part:
            part.append(10)
        part.extend(b for b in e if b < VOCAB)
    return parts


def windows(ids, torch):
    n = (len(ids) - 1) // T
    t = torch.tensor(ids[: n * T + 1], dtype=torch.long)
    return t[: n * T].view(n, T), t[1: n * T + 1].view(n, T)


def torch_run(train, held, epochs, batch, seed):
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(DIM, eps=1e-6)
            self.attn = nn.MultiheadAttention(DIM, HEADS, dropout=P, batch_first=True)
            self.drop = nn.Dropout(P)
            self.ln_2 = nn.LayerNorm(DIM, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Dropout(P), nn.Linear(4 * DIM, DIM),
                                     nn.Dropout(P))

        def forward(self, x, mask):
            h = self.ln_1(x)
            h, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
            x = x + self.drop(h)
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Parameter(torch.zeros(T, DIM))
            self.drop = nn.Dropout(P)
            self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
            self.ln = nn.LayerNorm(DIM, eps=1e-6)
            self.head = nn.Linear(DIM, VOCAB)
            self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))
            nn.init.normal_(self.tok.weight, 0, 0.02)
            nn.init.normal_(self.pos, 0, 0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear) and not isinstance(m, nn.modules.linear.NonDynamicallyQuantizableLinear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, ids):
            x = self.drop(self.tok(ids) + self.pos)
            for b in self.blocks:
                x = b(x, self.mask)
            return self.head(self.ln(x))

    net = Gpt()
    count = sum(p.numel() for p in net.parameters())
    decay = [p for p in net.parameters() if p.dim() >= 2]
    rest = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    x, y = windows(train, torch)
    vx, vy = windows(held, torch)
    losses, start = [], time.perf_counter()
    for epoch in range(epochs):
        net.train()
        order = torch.randperm(len(x))
        for b in range(0, len(x), batch):
            idx = order[b: b + batch]
            loss = nn.functional.cross_entropy(net(x[idx]).reshape(-1, VOCAB), y[idx].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        total = 0.0
        with torch.no_grad():
            for b in range(0, len(vx), batch):
                out = net(vx[b: b + batch])
                total += nn.functional.cross_entropy(out.reshape(-1, VOCAB), vy[b: b + batch].reshape(-1)).item() \
                    * len(out)
        losses.append(total / len(vx))
        print(f"  PyTorch epoch {epoch + 1}: validation loss {losses[-1]:.4f}", flush=True)
    return count, losses, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default="build/tools/tessera/tessera")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bar", type=float, default=0.03)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    train, held = corpus()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"CPU: {cpu}; {args.threads} threads on both sides; PyTorch {torch.__version__}")
    print(f"corpus: {len(train):,} training and {len(held):,} held-out characters; {args.epochs} epochs of "
          f"{(len(train) - 1) // T} windows of {T}, batch {args.batch}")

    cmd = [args.tessera, "train", "--model", "gpt-mini", "--data", "fortunes", "--epochs", str(args.epochs),
           "--batch", str(args.batch), "--optimizer", "adamw", "--lr", "1e-3", "--seed", str(args.seed), "--quiet",
           "--sample", "200"]
    print("Tessera: " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True)
    ours_time = time.perf_counter() - start
    print(run.stdout, end="")
    if run.returncode != 0:
        sys.exit(f"tessera train failed ({run.returncode}): {run.stderr}")
    chars = re.search(r"([\d,]+) training characters", run.stdout).group(1).replace(",", "")
    held_chars = re.search(r"([\d,]+) held out", run.stdout).group(1).replace(",", "")
    if (int(chars), int(held_chars)) != (len(train), len(held)):
        sys.exit(f"the corpora differ: Tessera {chars} and {held_chars} characters, this script {len(train)} and "
                 f"{len(held)}")
    ours = [float(v) for v in re.findall(r"validation loss ([\d.]+) \(", run.stdout)]

    print("PyTorch: the same model and recipe", flush=True)
    count, theirs, theirs_time = torch_run(train, held, args.epochs, args.batch, args.seed)
    print(f"\nparameters: PyTorch {count:,} (Tessera's gpt-mini: 834,432)")
    print(f"{'epoch':>5} {'Tessera':>9} {'PyTorch':>9} {'ratio':>7}")
    for e, (a, b) in enumerate(zip(ours, theirs)):
        print(f"{e + 1:>5} {a:>9.4f} {b:>9.4f} {a / b:>7.4f}")
    print(f"bits per character after {args.epochs} epochs: Tessera {ours[-1] / math.log(2):.3f}, "
          f"PyTorch {theirs[-1] / math.log(2):.3f}")
    print(f"time: Tessera {ours_time:.0f} s (the whole command), PyTorch {theirs_time:.0f} s (training and "
          f"validation)")
    gap = ours[-1] / theirs[-1] - 1
    verdict = "within" if gap <= args.bar else "NOT within"
    print(f"Tessera's validation loss is {100 * gap:+.2f}% of PyTorch's: {verdict} the {100 * args.bar:.0f}% bar")
    return 0 if gap <= args.bar else 1


if __name__ == "__main__":
    sys.exit(main())

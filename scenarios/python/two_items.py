"""Two .item() calls on different lines of one training step: the loss every step and an
accuracy read every step. Both wait in the same native code (one cudaStreamSynchronize in
libtorch), so only the Python line tells them apart: syncspy must report two call sites, each
at its own line, in `train_step`."""
import _harness as h
import torch

args = h.parse(__doc__)
work = h.Work(args.size)
spans = h.Spans()
log = []


def train_step():
    spans.begin()
    y = work()
    loss = y.sum()
    acc = (y > 0).float().mean()
    spans.end()
    log.append(loss.item())  # syncspy-site: loss
    log.append(acc.item())  # syncspy-site: accuracy


train_step()  # warm-up
torch.cuda.synchronize()
log.clear()
clock = h.Clock()
for step in range(args.iters):
    train_step()
loop_ms = clock.ms()
torch.cuda.synchronize()
h.emit("torch-two-items", args, {"item": 2 * args.iters}, {"work": spans.total_ms()},
       {"loop": loop_ms}, {"log": len(log) == 2 * args.iters})

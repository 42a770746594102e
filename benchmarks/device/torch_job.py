"""A Wattflow training job on a real GPU, for the device check (``nvml_agent_check.py``).

It follows the agent's protocol through ``jobclient/wattflow_client.py``, as
``jobclient/train_logreg.py`` does, but trains a PyTorch MLP on CUDA so the GPU's draw
moves: a regression of random inputs onto a fixed random teacher network, at
``WATTFLOW_BATCH_SIZE``, reporting iterations and the gradient statistics of two
half-batches each step, and stopping at ``WATTFLOW_TOTAL_ITERATIONS`` or when asked.
PyTorch is not a Wattflow dependency: this runs where a GPU image provides it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "jobclient"))
import wattflow_client as wf  # noqa: E402

WIDTH = 4096
DEPTH = 4


def mlp(width: int, depth: int) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    layers.append(torch.nn.Linear(width, width))
    return torch.nn.Sequential(*layers)


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def main() -> int:
    job = wf.connect()
    batch = int(job.batch_size or 256)
    total = job.total_iterations or 1000.0
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    teacher = mlp(WIDTH, 2).to(device).requires_grad_(False)
    model = mlp(WIDTH, DEPTH).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    noise = wf.GradientNoise()
    it = job.completed_iterations
    job.report(it, force=True)
    half = max(1, batch // 2)
    while it < total and not job.should_stop():
        x = torch.randn(batch, WIDTH, device=device)
        y = teacher(x)
        parts = []
        for chunk_x, chunk_y in ((x[:half], y[:half]), (x[half:], y[half:])):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(chunk_x).float(), chunk_y)
            loss.backward()
            parts.append(flat_grad(model).clone())
        mean = (parts[0] + parts[1]) / 2
        offset = 0
        for p in model.parameters():  # step on the whole batch's gradient
            n = p.numel()
            p.grad = mean[offset : offset + n].view_as(p).clone()
            offset += n
        opt.step()
        noise.update([float(g @ g) for g in parts], float(mean @ mean))
        it += 1
        job.report(it, grad_sqr=noise.grad_sqr, grad_var=noise.grad_var)
    torch.save(model.state_dict(), job.checkpoint_path("mlp.pt"))
    job.report(it, grad_sqr=noise.grad_sqr, grad_var=noise.grad_var, force=True)
    scale = noise.noise_scale(batch)
    sys.stdout.write(
        f"{'stopped' if job.should_stop() else 'done'} at iteration {it:.0f} on {device} "
        f"(batch {batch}), noise scale {'n/a' if scale is None else f'{scale:.0f}'} samples\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

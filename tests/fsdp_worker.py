"""FSDP2 training as `accelerate launch --config_file configs/accelerate/fsdp.yaml` does it, on gloo CPU processes.

Accelerate enables FSDP only on accelerators, so this worker, started by that command, builds the FSDP plugin
from the launcher's settings and calls Accelerate's `fsdp2_prepare_model` itself (each `_no_split_modules` layer
its own shard unit, the tied embeddings and softmax one unit, then the root). It trains with the paper's Adam on
this process's half of every batch and saves the full state dict as the Trainer does with FULL_STATE_DICT.
tests/test_distributed.py trains the same batches in one process.

    accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 2 --mixed_precision no \
        tests/fsdp_worker.py OUTPUT_DIR
"""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from vaswani_transformer import VaswaniTransformerForConditionalGeneration

if not __package__:  # run as a script by the launcher: the checkout's root makes `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_config  # noqa: E402  (after the path, for the launcher's run)

STEPS, BATCH, LENGTH = 4, 8, 7


def batches(vocab_size: int) -> list[dict[str, torch.Tensor]]:
    """Seeded random batches with padded ends, identical in every process."""
    generator = torch.Generator().manual_seed(1)
    result = []
    for _ in range(STEPS):
        input_ids = torch.randint(4, vocab_size, (BATCH, LENGTH), generator=generator)
        labels = torch.randint(4, vocab_size, (BATCH, LENGTH), generator=generator)
        lengths = torch.randint(2, LENGTH + 1, (BATCH,), generator=generator)
        padding = torch.arange(LENGTH) >= lengths[:, None]
        attention_mask = (~padding).long()
        result.append(
            {
                "input_ids": input_ids.masked_fill(padding, 0),
                "attention_mask": attention_mask,
                "labels": labels.masked_fill(padding, -100),
            }
        )
    return result


def new_model() -> VaswaniTransformerForConditionalGeneration:
    torch.manual_seed(0)
    return VaswaniTransformerForConditionalGeneration(tiny_config(dropout=0.0))


def train_steps(
    model: VaswaniTransformerForConditionalGeneration, rank: int = 0, world: int = 1
) -> list[float]:
    """STEPS Adam updates; this process takes rows rank, rank + world, …; returns the global token-mean losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    losses = []
    for batch in batches(model.config.vocab_size):
        items = int(
            (batch["labels"] != -100).sum()
        )  # all processes' target tokens, as the Trainer counts them
        shard = {key: value[rank::world] for key, value in batch.items()}
        # The model divides its summed loss by `items`; FSDP averages gradients over processes, so × world.
        loss = model(**shard, num_items_in_batch=items).loss * world
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach() / world
        if world > 1:
            dist.all_reduce(total)
        losses.append(float(total))
    return losses


def main(output_dir: str) -> None:
    from accelerate import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    plugin = (
        FullyShardedDataParallelPlugin()
    )  # from the FSDP_* settings the launcher read from the config file
    accelerator = SimpleNamespace(  # what fsdp2_prepare_model reads of an Accelerator (1.16 also its device)
        state=SimpleNamespace(fsdp_plugin=plugin),
        mixed_precision="no",
        is_main_process=rank == 0,
        device=torch.device("cpu"),
    )
    model = fsdp2_prepare_model(accelerator, new_model())
    units = [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]
    losses = train_steps(model, rank, world)
    state_dict = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        model.save_pretrained(output_dir, state_dict=state_dict)
        print(json.dumps({"losses": losses, "units": units}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

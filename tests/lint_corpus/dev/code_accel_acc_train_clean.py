import torch
from accelerate import Accelerator


def main(model, optimizer, training_dataloader, scheduler, loss_function):
    accelerator = Accelerator()
    device = accelerator.device
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    for batch in training_dataloader:
        optimizer.zero_grad()
        inputs, targets = batch
        inputs = inputs.to(device)
        targets = targets.to(device)
        outputs = model(inputs)
        loss = loss_function(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
    accelerator.save_state("ckpt")


if __name__ == "__main__":
    main(torch.nn.Linear(2, 2), None, [], None, torch.nn.MSELoss())

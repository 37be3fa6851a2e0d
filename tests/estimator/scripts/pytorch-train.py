"""The training script of the SageMaker SDK's PyTorch guide (using_pytorch.rst, "Prepare a
PyTorch Training Script" and "Save the Model"), filled in with a tiny model."""

import argparse
import json
import os

import torch

if __name__ == "__main__":
    parser = argparse.ArgumentParser()

    # hyperparameters sent by the client are passed as command-line arguments to the script.
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--use-cuda", type=bool, default=False)

    # Data, model, and output directories
    parser.add_argument("--output-data-dir", type=str, default=os.environ["SM_OUTPUT_DATA_DIR"])
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--train", type=str, default=os.environ["SM_CHANNEL_TRAIN"])
    parser.add_argument("--test", type=str, default=os.environ["SM_CHANNEL_TEST"])

    args, _ = parser.parse_known_args()

    seen = {
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "train": sorted(os.listdir(args.train)),
        "test": sorted(os.listdir(args.test)),
    }
    with open(os.path.join(args.output_data_dir, "seen.json"), "w") as f:
        json.dump(seen, f)

    model = torch.nn.Linear(4, 2)
    with open(os.path.join(args.model_dir, "model.pth"), "wb") as f:
        torch.save(model.state_dict(), f)

"""What a worker sees: the worker contract, and the API training scripts call."""

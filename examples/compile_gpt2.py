"""GPT-2 trained with `torch.compile(model, backend="tilec")` next to an identical eager copy.

The model is transformers' GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4,
vocab_size=1000, n_positions=128)), randomly initialised, in train mode (dropout 0.1); a batch is
8 rows of 64 tokens that count modulo 50 from a random start, and the loss is the model's own
next-token loss (`labels=input_ids`). tilec/bench/models.py builds both.

Run: `python examples/compile_gpt2.py [--steps 30] [--backend tilec]` (needs transformers).
"""

from compiling import main

if __name__ == "__main__":
    main("gpt2")

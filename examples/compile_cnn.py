"""A ResNet-18 trained with `torch.compile(model, backend="tilec")` next to an identical eager copy.

The model is transformers' ResNetForImageClassification(ResNetConfig(depths=[2, 2, 2, 2],
hidden_sizes=[64, 128, 256, 512], layer_type="basic", num_labels=10)), ResNet-18's basic blocks
with batch norm, randomly initialised, on CIFAR-sized 3 x 32 x 32 images: 8 a batch, noise plus one
fixed pattern per class, labelled with the class. tilec/bench/models.py builds both.

Run: `python examples/compile_cnn.py [--steps 30] [--backend tilec]` (needs transformers).
"""

from compiling import main

if __name__ == "__main__":
    main("resnet18")

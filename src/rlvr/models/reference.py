"""Reference policies for the KL term that are no second copy of the weights."""

from __future__ import annotations


class AdapterOffReference:
    """The LoRA policy with its adapters switched off: the base model, without a second copy."""

    def __init__(self, peft_model):
        self.peft_model = peft_model

    @property
    def config(self):
        return self.peft_model.config

    @property
    def training(self) -> bool:
        return self.peft_model.training

    def get_output_embeddings(self):
        return self.peft_model.get_output_embeddings()

    def parameters(self):
        return self.peft_model.parameters()

    def eval(self):
        self.peft_model.eval()
        return self

    def train(self, mode: bool = True):
        self.peft_model.train(mode)
        return self

    def __call__(self, **inputs):
        with self.peft_model.disable_adapter():
            return self.peft_model(**inputs)
